"""``apply`` of many jobs at once (issue 18): applies that run at the same time (two
operators, a deploy script beside beat's folder reconcile) each end well with the same
result, and a large apply writes the same rows as one job at a time did."""

from __future__ import annotations

import base64
import itertools
import json
import os
import pty
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import select

from cronchain.migrations import upgrade
from cronchain.scheduler.declare import apply as declarative
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.settings import ETA_HORIZON
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.job_batch import CHUNK, JobBatch
from cronchain.scheduler.storage.models import invocations, job_changes, jobs
from cronchain.scheduler.storage.rows import ConcurrentUpdate, JobRow
from cronchain.statemachine import Disable, Pause, Resume
from tests.support.cli import KEEP_HISTORY
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.jobs import noop_job_file
from tests.support.rows import parked

pytestmark = pytest.mark.postgres

APPLIES = 4  # at the same time
JOBS = 300


def cli_env(url: str, home: Path) -> dict[str, str]:
    env = dict(os.environ, CRONCHAIN_DATABASE_URL=url, CRONCHAIN_HOME=str(home))
    env.pop("CRONCHAIN_BROKER_URL", None)  # messages go to the embedded filesystem broker
    return env | KEEP_HISTORY


def sent_ticks(home: Path) -> list[tuple[int, int]]:
    """Every (job id, nonce) in the tick messages waiting in the embedded broker."""
    ticks: list[tuple[int, int]] = []
    for message in (home / "broker" / "queue").glob("*.msg"):
        payload = json.loads(message.read_text())
        args = json.loads(base64.b64decode(payload["body"]))[0]
        match payload["headers"]["task"]:
            case "cronchain.tick_later":
                ticks.append((args[0], args[1]))
            case "cronchain.tick_batch":
                ticks += [(job_id, nonce) for job_id, nonce in args[0]]
    return ticks


def stored(db: sqlalchemy.Engine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with db.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(jobs).order_by(jobs.c.id)).mappings()]
        changes = conn.execute(select(job_changes).order_by(job_changes.c.id)).mappings()
        return rows, [dict(c) for c in changes]


@pytest.fixture(params=["postgresql", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database for the CLI processes to share."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    url = f"sqlite:///{tmp_path}/cronchain.db"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def test_applies_at_the_same_time_all_succeed_and_each_job_is_created_and_ticked_once(
    database_url: str, tmp_path: Path
):
    # Due within the horizon: each first tick is sent, not parked.
    path = noop_job_file(tmp_path / "jobs.yaml", JOBS, project="deploy", schedule="every 1m")
    env = cli_env(database_url, tmp_path / "home")
    command = [sys.executable, "-m", "cronchain.scheduler.cli", "apply", "-v", str(path)]
    processes = [
        subprocess.Popen(
            command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(APPLIES)
    ]
    done = [(p.wait(timeout=120), *p.communicate()) for p in processes]
    failures = [err.decode()[:200] + err.decode()[-300:] for code, _, err in done if code]
    assert [code for code, _, _ in done] == [0] * APPLIES, failures
    outputs = sorted(out.decode() for _, out, _ in done)
    # One apply created the jobs; each one after it found them as the file says.
    names = "".join(f"  deploy/job{i:04d}\n" for i in range(JOBS))
    created = f"created: {JOBS}\n{names}updated: 0\ndisabled: 0\nunchanged: 0\n"
    unchanged = f"created: 0\nupdated: 0\ndisabled: 0\nunchanged: {JOBS}\n{names}"
    assert outputs == sorted([created] + [unchanged] * (APPLIES - 1))

    db = make_engine(database_url)
    try:
        rows, changes = stored(db)
    finally:
        db.dispose()
    assert sorted(r["name"] for r in rows) == [f"job{i:04d}" for i in range(JOBS)]
    assert {(r["state"], r["enabled"], r["generation"]) for r in rows} == {("SCHEDULED", True, 1)}
    assert all(r["tick_at"] is not None and r["tick_nonce"] is not None for r in rows)
    # As one apply writes them: created, then enabled, once per job.
    by_job: dict[int, list[str]] = {}
    for change in changes:
        by_job.setdefault(change["job_id"], []).append(change["change"])
    assert by_job == {r["id"]: ["created", "enabled"] for r in rows}
    # One first tick per job, the one its row waits for: no second one that would fire.
    ticks = sent_ticks(tmp_path / "home")
    assert Counter(job_id for job_id, _ in ticks) == Counter(r["id"] for r in rows)
    assert set(ticks) == {(r["id"], r["tick_nonce"]) for r in rows}


# --- the same rows as one job at a time -------------------------------------------------


def apply_one_by_one(engine: Engine, project: str, specs: list[JobSpec], prune: bool = False):
    """``apply`` as it was before issue 18, a job at a time with ``Engine.feed``: the
    reference that the bulk path must write the same rows as."""
    messages: list[Any] = []
    with engine.transaction() as conn:
        now = engine.clock()
        existing = locked_jobs(conn, project)
        for spec in specs:
            job = existing.pop(spec.name, None)
            if job is not None and job.enabled and job.revision == spec.revision:
                continue
            was_paused = None if job is None else job.spec.get("paused")
            if job is None:
                job = job_store.lock_job(conn, job_store.insert_job(conn, spec, now))
            assert job is not None
            event = declarative._event_for(job, spec)
            messages += engine.feed(conn, job, event, now, spec=spec, enabled=True).messages
            job = job_store.lock_job(conn, job.id)
            assert job is not None
            declared = spec.controls.get("paused")
            by_spec = job.pause_reason == (was_paused if isinstance(was_paused, str) else None)
            if declared and not job.paused:
                reason = declared if isinstance(declared, str) else None
                fed = engine.feed(conn, job, Pause(reason), now, paused=True, pause_reason=reason)
                messages += fed.messages
            elif not declared and was_paused and job.paused and by_spec:
                fed = engine.feed(conn, job, Resume(), now, paused=False, pause_reason=None)
                messages += fed.messages
        for job in existing.values():
            if prune:
                job_store.delete_jobs(conn, [job.id])
            elif job.enabled:
                flags = dict(enabled=False, paused=False, pause_reason=None)
                messages += engine.feed(conn, job, Disable(), now, **flags).messages
    engine.send(messages)


def locked_jobs(conn: sqlalchemy.Connection, project: str) -> dict[str, JobRow]:
    """Every job of ``project``, locked, by name, in id order."""
    ids = [head.id for head in job_store.heads_of_project(conn, project).values()]
    return {job.name: job for job in job_store.lock_jobs(conn, ids).values()}


def declared(project: str, *entries: dict[str, Any]) -> list[JobSpec]:
    return [JobSpec.from_dict(project, entry) for entry in entries]


FIRST = [
    {"name": "hourly", "schedule": "every 1h", "noop": {}},
    {"name": "nightly", "schedule": "0 2 * * *", "timezone": "Europe/Berlin", "noop": {}},
    {"name": "on-demand", "schedule": "triggered", "noop": {}},
    {"name": "after", "schedule": "with 10m interval", "overlap": "allow", "noop": {}},
    {"name": "held", "schedule": "every 10m", "paused": "maintenance", "noop": {}},
    {
        "name": "quiet",
        "schedule": "*/5 * * * *",
        "paused": True,
        "overlap": "buffer_one",
        "noop": {},
    },
]
SECOND = [  # three hours later
    {"name": "hourly", "schedule": "every 30m", "noop": {}},  # its tick moves
    {"name": "nightly", "schedule": "0 2 * * *", "timezone": "Asia/Tokyo", "noop": {}},
    {"name": "held", "schedule": "every 10m", "noop": {}},  # resumed: its missed slots skipped
    {
        "name": "quiet",
        "schedule": "*/5 * * * *",
        "paused": True,
        "overlap": "buffer_one",
        "noop": {},
    },
    {"name": "new", "schedule": "every 15s", "lease": "2m", "noop": {}},
]  # on-demand: gone from the file, so disabled
THIRD = [{"name": "hourly", "schedule": "every 30m", "noop": {}}]  # with prune


def snapshot(db: sqlalchemy.Engine, port: RecordingPort, project: str) -> dict[str, Any]:
    """A project's jobs, changes, runs and ticks sent, by job name, without what differs
    between two projects applied alike: ids and nonces (each step draws one, and the bulk
    path draws one more for a step it hands to ``Engine.feed``)."""
    with db.connect() as conn:
        rows = conn.execute(select(jobs).where(jobs.c.project == project)).mappings().all()
        names = {r["id"]: r["name"] for r in rows}
        changes = conn.execute(
            select(job_changes).where(job_changes.c.job_id.in_(names)).order_by(job_changes.c.id)
        ).mappings()
        runs = conn.execute(
            select(invocations)
            .where(invocations.c.job_id.in_(names))
            .order_by(invocations.c.job_id, invocations.c.slot)
        ).mappings()
        nonces = {r["id"]: r["tick_nonce"] for r in rows}
        waiting = {r["id"]: r["tick_nonce"] for r in rows if not parked(r)}
        found: dict[str, Any] = {
            "jobs": {
                r["name"]: {k: v for k, v in r.items() if k not in ("id", "project", "tick_nonce")}
                for r in rows
            },
            "changes": [(names[c["job_id"]], *list(c.values())[2:]) for c in changes],
            "runs": [(names[r["job_id"]], r["slot"], r["status"], r["reason"]) for r in runs],
        }
    ticks = [(job_id, nonce, eta) for job_id, nonce, eta in port.ticks if job_id in names]
    # Every tick a row waits for was sent, but a parked one; a tick sent for another
    # nonce is stale.
    assert {(job_id, nonce) for job_id, nonce, _ in ticks} >= {
        (i, n) for i, n in waiting.items() if n is not None
    }
    found["ticks"] = sorted((names[j], eta) for j, n, eta in ticks if nonces[j] == n)
    return found


@pytest.mark.parametrize("chunk", [CHUNK, 2])
def test_bulk_apply_writes_what_one_job_at_a_time_wrote(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch, chunk: int
):
    """Creates (their first step ``first_enable``'s), schedule and zone changes, pauses
    declared and taken out (whose resume records the skipped slots, a step the bulk path
    hands to ``Engine.feed``), a job gone from the file, a prune: the same rows, change
    records, runs and ticks; and so when the held jobs are written every ``chunk``."""
    monkeypatch.setattr(declarative, "CHUNK", chunk)
    bulk_port, one_port = RecordingPort(), RecordingPort()
    counter = itertools.count(1)
    bulk = Engine(
        db, bulk_port, default_invokers(), grace=GRACE, clock=clock, nonces=counter.__next__
    )
    one = Engine(
        db, one_port, default_invokers(), grace=GRACE, clock=clock, nonces=counter.__next__
    )
    skipped = []
    for entries, advance, prune in [
        (FIRST, 0, False),
        (SECOND, 3 * 3600, False),
        (THIRD, 60, True),
    ]:
        clock.advance(advance)
        declarative.apply(bulk, "bulk", declared("bulk", *entries), prune=prune)
        apply_one_by_one(one, "one", declared("one", *entries), prune=prune)
        found = snapshot(db, bulk_port, "bulk")
        assert found == snapshot(db, one_port, "one")
        skipped.append(sum(run[2] == "SKIPPED" for run in found["runs"]))
    assert skipped == [0, 18, 0]  # held's slots while it was paused; then it is pruned


def test_a_held_save_of_a_row_that_moved_on_is_refused(db: sqlalchemy.Engine, clock: Clock):
    """The generation check of ``save_job`` holds for the bulk write too."""
    engine = Engine(db, RecordingPort(), default_invokers(), grace=GRACE, clock=clock)
    declarative.apply(engine, "p", declared("p", *FIRST[:2]))
    with engine.transaction() as conn:
        stale = locked_jobs(conn, "p")["hourly"]
        conn.execute(jobs.update().where(jobs.c.id == stale.id).values(generation=99))
        batch = JobBatch(clock.now)
        batch.save(stale, stale.snapshot, watchdog_at=None, enabled=True)
        with pytest.raises(ConcurrentUpdate):
            batch.write(conn)


def test_many_jobs_are_written_in_chunks_and_read_back_whole(db: sqlalchemy.Engine, clock: Clock):
    count = 2 * CHUNK + 1
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock)
    entries = [
        {"name": f"j{i:05d}", "schedule": f"every {i + 1}m", "noop": {}} for i in range(count)
    ]
    assert len(declarative.apply(engine, "p", declared("p", *entries)).created) == count
    entries = [{**entry, "timezone": "Asia/Tokyo"} for entry in entries]
    assert len(declarative.apply(engine, "p", declared("p", *entries)).updated) == count
    rows, changes = stored(db)
    assert [r["name"] for r in rows] == [f"j{i:05d}" for i in range(count)]  # ids in file order
    assert {(r["generation"], r["timezone"]) for r in rows} == {(2, "Asia/Tokyo")}
    assert Counter(c["change"] for c in changes) == {
        "created": count,
        "enabled": count,
        "updated": count,
    }
    sent = {(job_id, nonce) for job_id, nonce, _ in port.ticks}
    assert sent >= {(r["id"], r["tick_nonce"]) for r in rows if not parked(r)}
    far = [r for r in rows if r["tick_at"] > clock.now + ETA_HORIZON]
    assert [r for r in rows if parked(r)] == far and far


# --- the progress bar -------------------------------------------------------------------


def on_a_terminal(command: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``command`` with its stderr on a pseudo-terminal; its exit status and what it
    drew there."""
    master, slave = pty.openpty()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    process.communicate(timeout=120)
    return process.wait(), drawn.decode()


def test_a_bar_is_drawn_on_a_terminal_and_nothing_in_a_pipe(pg_url: str, tmp_path: Path):
    env = cli_env(pg_url, tmp_path / "home")
    cli = [sys.executable, "-m", "cronchain.scheduler.cli"]
    path = noop_job_file(tmp_path / "jobs.yaml", 1500, project="deploy", schedule="every 1m")
    piped = subprocess.run([*cli, "apply", str(path)], env=env, cwd=tmp_path, capture_output=True)
    assert piped.returncode == 0 and piped.stderr == b""

    noop_job_file(tmp_path / "jobs.yaml", 1500, project="deploy", schedule="every 2m")
    code, drawn = on_a_terminal([*cli, "apply", str(path)], env, tmp_path)
    assert code == 0
    assert "\r\x1b[Kapply deploy: preparing  0/1,500 jobs  0%" in drawn
    assert "apply deploy: writing  1,500/1,500 jobs  100%" in drawn
    assert drawn.endswith("\r\x1b[K")  # erased: what the command prints starts clean

    window = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T01:59:00Z"]  # 1,500 slots
    code, drawn = on_a_terminal([*cli, "backfill", "deploy/job0000", *window], env, tmp_path)
    assert code == 0
    assert "backfill deploy/job0000  1,500/1,500 slots  100%" in drawn
    piped = subprocess.run(
        [*cli, "backfill", "deploy/job0001", *window], env=env, cwd=tmp_path, capture_output=True
    )
    assert piped.returncode == 0 and piped.stderr == b""
