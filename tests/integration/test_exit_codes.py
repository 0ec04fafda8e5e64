"""The exit codes of the command line's reference (docs/reference/cli.md), command by
command: 0 done, 1 the database or the broker cannot be reached (or the database is not
migrated), 2 bad input. Each failure is one line on stderr that names its cause, never a
traceback.

Each case runs every command of that table: in this process where nothing is
sent (fast), and as real processes, several at a time, for the commands that send (a
process reads its Celery settings once) and for one command of each case, so that the
real entry point is seen to print one line too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy
from celery import Celery
from kombu.exceptions import EncodeError

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.cli.main import main
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import NotFound, SpecError, TransientError
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.workers.port import CeleryPort
from cronchain.scheduler.workers.runtime import CommandPort, patience_of_a_command
from tests.support import services
from tests.support.cli import KEEP_HISTORY
from tests.support.engine import RecordingPort

T = "2026-01-01T00:00Z"
T_LATER = "2026-01-01T02:00Z"
FAR = "9999-12-31T23:59:59Z"
SAVED = "the change is saved, but the broker"
# One job per command that changes one, so that the commands can run at the same time.
JOBS = """
project: demo
jobs:
  - {name: ping, schedule: every 5s, noop: {}}
  - {name: t, schedule: triggered, noop: {}}
  - {name: p, schedule: every 1h, noop: {}}
  - {name: r, schedule: every 1m, noop: {}}
  - {name: a, schedule: triggered, noop: {}}
  - {name: b, schedule: every 1h, noop: {}}
"""
OTHER = "project: other\njobs:\n  - {name: new, schedule: every 1m, noop: {}}\n"  # its tick is sent


@dataclass(frozen=True)
class Done:
    code: int
    stdout: str
    stderr: str
    seconds: float


def commands(folder: Path, invocation: int = 1) -> dict[str, list[str]]:
    """Each command of the reference's table, as the test table runs it."""
    (folder / "other.yaml").write_text(OTHER)
    return {
        "db upgrade": ["db", "upgrade"],
        "apply": ["apply", str(folder / "other.yaml")],
        "jobs": ["jobs"],
        "history": ["history"],
        "history --invocation": ["history", "--invocation", str(invocation)],
        "explain": ["explain", "demo/ping", "--at", T],
        "trigger": ["trigger", "demo/t"],
        "pause": ["pause", "demo/p"],
        "resume": ["resume", "demo/r"],
        "abort": ["abort", "demo/a"],
        "backfill": ["backfill", "demo/b", "--from", T, "--to", T_LATER],
        "next": ["next", "@daily", "--after", T],
    }


def environment(folder: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
    return env | {"CRONCHAIN_HOME": str(folder / "home")} | KEEP_HISTORY | values


def cronchain(argv: list[str], env: dict[str, str], cwd: Path) -> Done:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "cronchain.scheduler.cli", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Done(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def in_process(
    argv: list[str],
    values: dict[str, str],
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Done:
    """``cronchain ARGV`` in this process, with only these ``CRONCHAIN_*`` variables set.
    Where no message is sent: the Celery settings are read once per process."""
    for name in [k for k in os.environ if k.startswith("CRONCHAIN_")]:
        monkeypatch.delenv(name)
    for name, value in (environment(folder) | values).items():
        if name.startswith("CRONCHAIN_"):
            monkeypatch.setenv(name, value)
    started = time.monotonic()
    try:
        code = main(argv)
    except SystemExit as exited:  # argparse
        code = int(exited.code or 0)
    out, err = capsys.readouterr()
    return Done(code, out, err, time.monotonic() - started)


def run_all(runs: dict[str, tuple[list[str], dict[str, str]]], cwd: Path) -> dict[str, Done]:
    """Each named command in a process of its own, several at a time."""
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 2)) as pool:
        futures = {
            name: pool.submit(cronchain, argv, env, cwd) for name, (argv, env) in runs.items()
        }
        return {name: future.result() for name, future in futures.items()}


def check(name: str, done: Done, code: int, *cause: str) -> None:
    """The exit status, and stderr: empty on success, else one line naming the cause."""
    where = f"{name}: exit {done.code}\n{done.stderr}"
    assert done.code == code, where
    assert "Traceback" not in done.stderr, where
    if code == 0:
        assert done.stderr == "", where
        return
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cronchain: "), where
    for text in cause:
        assert text in lines[0], where


def closed_port() -> int:
    return services.free_port()  # nothing listens there once the probe socket is closed


@pytest.fixture
def empty_database(pg_admin: sqlalchemy.Engine) -> Iterator[str]:
    """A database that exists and has no tables: ``db upgrade`` was never run."""
    name = services.create_database(pg_admin)
    yield services.database_url(name)
    services.drop_database(pg_admin, name)


@pytest.fixture
def jobs_database(pg_url: str, tmp_path: Path) -> tuple[str, int]:
    """A migrated database holding the jobs (demo/r paused, demo/a running); returns its
    URL and the running invocation's id. Written with a port that sends nothing."""
    (tmp_path / "jobs.yaml").write_text(JOBS)
    engine = Engine(
        make_engine(pg_url), RecordingPort(), default_invokers(), grace=timedelta(seconds=15)
    )
    sched = Scheduler(engine)
    sched.apply(tmp_path / "jobs.yaml")
    sched.pause("demo/r")
    invocation = sched.trigger("demo/a")["invocation"]
    engine.db.dispose()
    return pg_url, invocation


# --- the database -----------------------------------------------------------------------


def unreachable(pg_admin: sqlalchemy.Engine) -> dict[str, tuple[str, str]]:
    """Databases that cannot be reached, each with what the driver says about it."""
    role = services.database_url("postgres").replace("postgres@", "no_such_role:secret@", 1)
    missing = "cronchain_no_such_database"
    return {
        "closed port": (
            f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres",
            "Connection refused",
        ),
        "unknown role": (role, 'role "no_such_role" does not exist'),
        "missing database": (
            services.database_url(missing),
            f'database "{missing}" does not exist',
        ),
    }


def shown(url: str) -> str:
    """``url`` as the message names it: without its password, or the default driver."""
    return url.replace(":secret@", ":***@").replace("postgresql+psycopg://", "postgresql://")


@pytest.mark.postgres
def test_an_unreachable_database_is_exit_1_for_every_command(  # type: ignore[no-untyped-def]
    pg_admin, tmp_path: Path, monkeypatch, capsys
):
    for case, (url, cause) in unreachable(pg_admin).items():
        for command, argv in commands(tmp_path).items():
            done = in_process(argv, {"CRONCHAIN_DATABASE_URL": url}, tmp_path, monkeypatch, capsys)
            if command == "next":  # needs no database
                check(command, done, 0)
                continue
            check(f"{case}: {command}", done, 1, f"database {shown(url)} is unreachable: ", cause)
            assert "secret" not in done.stderr


@pytest.mark.postgres
def test_an_unreachable_database_in_real_processes(pg_admin, tmp_path: Path):  # type: ignore[no-untyped-def]
    table = commands(tmp_path)
    bad = unreachable(pg_admin)
    picked = {"closed port": "trigger", "unknown role": "history", "missing database": "db upgrade"}
    runs = {
        case: (table[picked[case]], environment(tmp_path, CRONCHAIN_DATABASE_URL=url))
        for case, (url, _) in bad.items()
    }
    for case, done in run_all(runs, tmp_path).items():
        url, cause = bad[case]
        check(case, done, 1, f"database {shown(url)} is unreachable: ", cause)


@pytest.mark.postgres
def test_a_database_not_migrated_says_to_upgrade_it(  # type: ignore[no-untyped-def]
    empty_database: str, tmp_path: Path, monkeypatch, capsys
):
    env = {"CRONCHAIN_DATABASE_URL": empty_database}
    table = commands(tmp_path)
    upgrade = table.pop("db upgrade")
    cause = (f"database {shown(empty_database)} is not migrated (", "run `cronchain db upgrade`")
    for command, argv in table.items():
        done = in_process(argv, env, tmp_path, monkeypatch, capsys)
        check(command, done, 0 if command == "next" else 1, *cause)
    real = cronchain(table["jobs"], environment(tmp_path, **env), tmp_path)
    check("jobs, in a real process", real, 1, *cause)
    check("db upgrade", in_process(upgrade, env, tmp_path, monkeypatch, capsys), 0)
    check("jobs", in_process(["jobs"], env, tmp_path, monkeypatch, capsys), 0)


@pytest.mark.postgres
def test_a_migration_the_database_refuses_is_one_line(  # type: ignore[no-untyped-def]
    empty_database: str, tmp_path: Path, monkeypatch, capsys
):
    """A table of cronchain's name made by someone else: the migration that creates it
    fails, and ``db upgrade`` says so in one line (exit 1), not with a traceback."""
    engine = sqlalchemy.create_engine(
        empty_database.replace("postgresql://", "postgresql+psycopg://")
    )
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE pools (name text)")
    engine.dispose()
    env = {"CRONCHAIN_DATABASE_URL": empty_database}
    done = in_process(["db", "upgrade"], env, tmp_path, monkeypatch, capsys)
    check("db upgrade", done, 1, f"database {shown(empty_database)}", "pools")


@pytest.mark.parametrize(
    "name, cause",
    [
        ("empty.db", "is not migrated (no such table: "),
        ("folder", "is unreachable: unable to open database file"),
        ("text.db", "is unreachable: file is not a database"),
    ],
)
def test_sqlite_says_the_same(name: str, cause: str, tmp_path: Path, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    (tmp_path / "folder").mkdir()
    (tmp_path / "text.db").write_text("not a database")
    url = f"sqlite:///{tmp_path / name}"
    for command in ("jobs", "trigger"):
        argv = commands(tmp_path)[command]
        done = in_process(argv, {"CRONCHAIN_DATABASE_URL": url}, tmp_path, monkeypatch, capsys)
        check(command, done, 1, f"database {url} {cause}")


# --- the broker -------------------------------------------------------------------------

# What each command does with the broker away: 1 if it had a message to send.
BROKER_AWAY = {
    "db upgrade": 0,
    "apply": 1,  # a new job: its first tick
    "jobs": 0,
    "history": 0,
    "history --invocation": 0,
    "explain": 0,
    "trigger": 1,  # the run
    "pause": 0,  # nothing to send
    "resume": 1,  # the next tick (a minute away: sent, not parked)
    "abort": 0,  # a noop run: no revoke
    "backfill": 1,  # the first start
    "next": 0,
}


@pytest.mark.postgres
def test_an_unreachable_broker_is_exit_1_after_the_change_is_saved(  # type: ignore[no-untyped-def]
    jobs_database, tmp_path: Path, monkeypatch, capsys
):
    """The commands that send run as real processes, since a process reads its Celery
    settings once; the others in this process."""
    url, invocation = jobs_database
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    values = {"CRONCHAIN_DATABASE_URL": url, "CRONCHAIN_BROKER_URL": broker}
    table = commands(tmp_path, invocation)
    env = environment(tmp_path, **values)
    sending = {c: (argv, env) for c, argv in table.items() if BROKER_AWAY[c]}
    results = run_all(sending, tmp_path)
    for command, argv in table.items():
        if command not in sending:
            results[command] = in_process(argv, values, tmp_path, monkeypatch, capsys)
    cause = (f"{SAVED} {broker} did not answer", "Connection refused", "watchdog")
    for command, done in results.items():
        check(command, done, BROKER_AWAY[command], *cause)
        assert done.seconds < 15, command
    assert "invocation" in results["trigger"].stdout  # what was saved is said as usual

    # The changes are committed: the watchdog finds them due and sends them later.
    sched = Scheduler(Engine(make_engine(url), RecordingPort(), {}, grace=timedelta(0)))
    listed = {job["id"]: job for job in sched.jobs()}
    assert listed["demo/p"]["paused"] and not listed["demo/r"]["paused"]
    assert "other/new" in listed
    assert [h["status"] for h in sched.history("demo/t")] == ["STARTING"]
    assert len(sched.history("demo/b")) == 3
    sched.engine.db.dispose()


@pytest.mark.postgres
def test_a_broker_that_never_answers_is_given_up_on_within_seconds(  # type: ignore[no-untyped-def]
    jobs_database, tmp_path: Path
):
    """A broker that takes the connection and never replies (a half-open connection, a
    wedged server): the send gives up after a few seconds, not after Celery's minutes."""
    url, _ = jobs_database
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        broker = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        env = environment(tmp_path, CRONCHAIN_DATABASE_URL=url, CRONCHAIN_BROKER_URL=broker)
        done = cronchain(["trigger", "demo/t"], env, tmp_path)
    check("trigger", done, 1, f"{SAVED} {broker} did not answer", "Timeout")
    assert done.seconds < 10


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variable, value",
    [
        ("CRONCHAIN_TICK_SLACK_MS", "7"),
        ("CRONCHAIN_WATCHDOG_INTERVAL", "0"),
        ("CRONCHAIN_TICK_BATCH", "abc"),
        ("CRONCHAIN_RECONCILE_INTERVAL", "nan"),
        ("CRONCHAIN_WORK_CONCURRENCY", "inf"),
        ("CRONCHAIN_BROKER_URL", "nonsense"),
        ("CRONCHAIN_DATABASE_URL", "mysql://u:secret@h/db"),
    ],
)
def test_a_bad_variable_is_exit_2_naming_it(
    variable: str, value: str, tmp_path: Path, monkeypatch, capsys
):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CRONCHAIN_HOME", str(tmp_path))
    monkeypatch.setenv(variable, value)
    assert main(["jobs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cronchain: {variable}: must ") and err.count("\n") == 1, err
    assert "secret" not in err


def test_a_bad_variable_in_a_real_process(tmp_path: Path):
    done = cronchain(["jobs"], environment(tmp_path, CRONCHAIN_TICK_BATCH="0"), tmp_path)
    check("jobs", done, 2, "CRONCHAIN_TICK_BATCH: must be a whole number of ticks from 1 to")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["history", "--limit", "-1"], "--limit"),
        (["history", "--limit", "0"], "--limit"),
        (["history", "--limit", "10001"], "--limit"),
        (["history", "--invocation", "99999999999999999999999"], "--invocation"),
        (["history", "--invocation", "0"], "--invocation"),
        (["abort", "--invocation", "99999999999999999999999"], "--invocation"),
        (["history", "--since", FAR], "--since"),
        (["explain", "demo/ping", "--at", FAR], "--at"),
        (["explain", "demo/ping", "--at", "9999-12-31T23:00:00-05:00"], "--at"),
        (["backfill", "demo/ping", "--from", FAR, "--to", T], "--from"),
        (["backfill", "demo/ping", "--from", T, "--to", FAR], "--to"),
        (["backfill", "demo/ping", "--from", "1969-12-31T23:59Z", "--to", T], "--from"),
        (["backfill", "demo/ping", "--from", T, "--to", T, "--max-concurrent", "0"], "--max-"),
        (["backfill", "demo/ping", "--from", T, "--to", T, "--max-concurrent", "-1"], "--max-"),
        (["next", "@daily", "--after", FAR], "--after"),
        (["next", "@daily", "--count", "0"], "--count"),
        (["next", "@daily", "--count", "1001"], "--count"),
        (["up", "--concurrency", "0"], "--concurrency"),
        (["up", "--work-concurrency", "0"], "--work-concurrency"),
    ],
)
def test_an_argument_out_of_bounds_is_exit_2_naming_the_flag(argv: list[str], flag: str, capsys):  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}" in err and "Traceback" not in err


def test_arguments_at_their_bounds_are_taken(capsys):  # type: ignore[no-untyped-def]
    assert main(["next", "every 1h", "--after", "8999-12-31T00:00Z", "--count", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("8999-12-31T01:00:00Z")


def test_a_command_stops_sending_once_the_broker_did_not_answer():
    """The first message the broker does not take is noted; later ones are not even
    tried, each would wait as long. A failure that is not the broker's is left alone."""
    broker = f"redis://:secret@127.0.0.1:{closed_port()}/0"
    app = patience_of_a_command(Celery("test", broker=broker))
    port = CommandPort(CeleryPort(app, "cronchain"), broker)
    with pytest.raises(TransientError, match="did not answer"):
        port.revoke("task-1")
    assert str(port.unsent).startswith("the broker redis://:**@127.0.0.1:")
    assert "secret" not in str(port.unsent)
    tried: list[object] = []
    port.port.tick_later = lambda *args: tried.append(args)  # type: ignore[method-assign]
    with pytest.raises(TransientError, match="did not answer"):
        port.tick_later(1, 2, datetime.now(UTC))
    assert tried == []  # after the first refusal nothing more is sent, nor waited for

    port = CommandPort(CeleryPort(app, "cronchain"), broker)
    with pytest.raises(EncodeError):
        port.tick_batch([(1, object())], datetime.now(UTC))  # type: ignore[list-item]
    assert port.unsent is None


# --- the Python API refuses the same -----------------------------------------------------


@pytest.mark.postgres
def test_the_api_refuses_what_the_cli_does(engine: Engine):
    sched = Scheduler(engine)
    for limit in (-1, 0, 10_001):
        with pytest.raises(SpecError, match="^limit: "):
            sched.history(limit=limit)
    assert sched.history(limit=10_000) == []
    with pytest.raises(SpecError, match="^since: "):
        sched.history(since=datetime(9999, 12, 31, tzinfo=UTC))
    with pytest.raises(NotFound, match="no invocation"):
        sched.invocation(2**64)
    with pytest.raises(NotFound, match="no invocation"):
        sched.abort(invocation=2**64)
    with pytest.raises(SpecError, match="^at: .* out of range"):
        sched.explain("p/a", datetime(9999, 12, 31, tzinfo=UTC))
    with pytest.raises(SpecError, match="^at: .* no time zone"):
        sched.explain("p/a", datetime(2026, 1, 1))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(SpecError, match="^max_concurrent: "):
        sched.backfill("p/a", start, start, max_concurrent=0)
    with pytest.raises(SpecError, match="^end: "):
        sched.backfill("p/a", start, datetime(9999, 1, 1, tzinfo=UTC))
