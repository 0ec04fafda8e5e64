"""``cronchain up`` runs both paths and stops cleanly, however it is asked to.

Each broker (the embedded default and Redis with PostgreSQL) x SIGINT or SIGTERM x sent
to ``up`` alone (``kill PID``, ``docker stop``) or to its whole process group (a
terminal, ``timeout``, supervisors): ``up`` must exit 0 within STOP_WITHIN seconds and
leave no process of its session alive (the workers run in process groups of their own).
With the embedded broker, a SIGTERM to the group of a worker hung it before cronchain's
filesystem transport drove the worker's event loop (fsbroker.Transport says why).

Each case signals once a run of the job file's noop job has succeeded through both paths.
One database (and home) per broker serves every case.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from cronchain.scheduler.cli.supervise import Supervisor
from tests.e2e.harness import Cluster
from tests.support import services
from tests.support.jobs import noop_job_file
from tests.support.wait import now, wait_until

pytestmark = pytest.mark.e2e
STOP_WITHIN = 10
# ``count`` noop jobs every second, and with ``long``, one that takes 60 s every 2 s
UP = {"project": "up", "name": "noop{}", "schedule": "every 1s", "timezone": None}
LONG = {"name": "long", "schedule": "every 2s", "noop": {"sleep": "60s"}}
READY = (r"control@\S+ ready\.", r"work@\S+ ready\.", r"beat: Starting\.\.\.")


@pytest.fixture(scope="module")
def broker_settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """CRONCHAIN_* settings shared by every case of one broker: the home, and for Redis a
    private server and a migrated PostgreSQL database."""
    home = tmp_path_factory.mktemp(f"home-{request.param}")
    if request.param == "embedded":
        yield {"CRONCHAIN_HOME": str(home)}
        return
    admin: sqlalchemy.Engine = request.getfixturevalue("pg_admin")
    name = services.create_database(admin, template=request.getfixturevalue("pg_template"))
    with services.redis_server(home) as redis:
        yield {
            "CRONCHAIN_HOME": str(home),
            "CRONCHAIN_DATABASE_URL": services.database_url(name),
            "CRONCHAIN_BROKER_URL": redis.url,
        }
    services.drop_database(admin, name)


BROKERS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("redis", id="redis", marks=[pytest.mark.postgres, pytest.mark.redis]),
]


@pytest.fixture
def cluster(tmp_path: Path, broker_settings: dict[str, str]) -> Iterator[Cluster]:
    """The test's processes, each in a session of its own, whatever is left of which is
    killed at the end, pass or fail."""
    c = Cluster.create(tmp_path, **broker_settings)
    yield c
    for process in c.processes.values():
        kill_session(process.pid)
        process.wait()


def start_up(cluster: Cluster, long: bool = False) -> subprocess.Popen[bytes]:
    """``cronchain up`` with a noop job every second; returns once both workers are ready,
    beat has started and a run has succeeded (through both paths), so that the signal
    does not land in the burst of tasks a start sends."""
    since = now().isoformat()
    jobs = str(noop_job_file(cluster.folder / "jobs.yaml", 1, **UP, more=(LONG,) if long else ()))
    cluster.start("up", sys.executable, "-m", "cronchain.scheduler.cli", "up", jobs)
    up = cluster.processes["up"]

    def ready() -> bool:
        if up.poll() is not None:
            raise AssertionError(f"up exited early:\n{cluster.log('up')[-3000:]}")
        if not all(re.search(pattern, cluster.log("up")) for pattern in READY):
            return False
        runs = json.loads(cluster.cronchain("history", "--json", "--since", since))
        return any(run["status"] == "SUCCEEDED" for run in runs)

    wait_until(ready, 60, "both workers to be ready, beat to start and a run to succeed")
    return up


def processes(session: int) -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of each process of a session that has not exited
    (a zombie has)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # it exited while we looked
        state, ppid, _group, sid = fields[:4]
        if int(sid) == session and state != "Z":
            found.append((int(stat.parent.name), int(ppid), command))
    return found


def kill_session(session: int) -> None:
    for pid, _, _ in processes(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for_exit(cluster: Cluster, name: str = "up") -> int:
    """The process's status once it has exited within STOP_WITHIN s, and every process of
    its session (its group and its workers' groups) within a second more."""
    process = cluster.processes[name]
    try:
        code = process.wait(timeout=STOP_WITHIN)
    except subprocess.TimeoutExpired:
        left = processes(process.pid)
        pytest.fail(f"{name} did not stop in {STOP_WITHIN} s: {left}\n{cluster.log(name)[-3000:]}")
    wait_until(lambda: not processes(process.pid), 1, f"the rest of {name}'s session to exit")
    return code


@pytest.mark.parametrize("to", ["up", "group"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("broker_settings", BROKERS, indirect=True)
def test_up_stops_cleanly(cluster: Cluster, sig: signal.Signals, to: str) -> None:
    up = start_up(cluster)
    if to == "group":
        os.killpg(up.pid, sig)
    else:
        up.send_signal(sig)
    code = wait_for_exit(cluster)
    log = cluster.log("up")
    assert code == 0, log[-3000:]
    assert f"cronchain: got {sig.name}: sending SIGTERM to control, work" in log
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("broker_settings", BROKERS[:1], indirect=True)
def test_a_first_ctrl_c_says_what_it_waits_for_and_a_second_stops_at_once(
    cluster: Cluster,
) -> None:
    """A run of a minute is in hand: the first SIGINT says so and how long it waits; the
    second stops both paths at once, ``up`` exits 0 (it stopped as asked), and the run
    it left is the watchdog's (RUNNING, its lease to lapse)."""
    up = start_up(cluster, long=True)
    wait_until(lambda: claimed_long_run(cluster), 30, "the long run to be claimed")
    up.send_signal(signal.SIGINT)
    wait_until(lambda: "for at most 30 s" in cluster.log("up"), 10, "what up waits for")
    log = cluster.log("up")
    assert re.search(r"finishing 1 run\(s\): up/long \(slot \S+Z, \d+\.\d s in\)", log), log
    assert "again (Ctrl-C) to stop at once: the watchdog takes over what is left" in log
    up.send_signal(signal.SIGINT)
    assert wait_for_exit(cluster) == 0
    log = cluster.log("up")
    assert "got SIGINT: sending SIGKILL to" in log and "cronchain: stopped" in log, log[-3000:]
    assert claimed_long_run(cluster)  # still RUNNING: the watchdog ends it when its lease lapses


def claimed_long_run(cluster: Cluster) -> bool:
    runs = json.loads(cluster.cronchain("history", "up/long", "--json"))
    return any(run["status"] == "RUNNING" and run["started_at"] for run in runs)


@pytest.mark.parametrize("broker_settings", BROKERS[:1], indirect=True)
def test_a_path_that_exits_on_its_own_stops_the_other(cluster: Cluster) -> None:
    """A work path that dies leaves no control path running without it: ``up`` stops it
    and exits 1, saying which path ended."""
    up = start_up(cluster)
    [work] = [pid for pid, ppid, cmd in processes(up.pid) if ppid == up.pid and "work@" in cmd]
    os.kill(work, signal.SIGKILL)
    assert wait_for_exit(cluster) == 1
    log = cluster.log("up")
    assert "the work path exited on its own (killed by SIGKILL)" in log
    assert "sending SIGTERM to control" in log


@pytest.mark.parametrize("broker_settings", BROKERS[:1], indirect=True)
def test_an_embedded_control_worker_stops_on_a_sigterm_to_its_group(cluster: Cluster) -> None:
    """The hang itself, which ``up`` no longer exposes its workers to: a prefork worker
    with beat on the embedded broker, as ``up`` ran it alone before and as a supervisor
    or ``timeout`` may run it. Its pool processes exit on the SIGTERM in the middle of
    their tasks (hence no check of the log for tracebacks); before, one of them would die
    holding the pool's lock, and the worker hang at exit: with 20 jobs every second, 5
    times out of 5 (1 out of 5 with one job)."""
    cluster.cronchain("db", "upgrade")
    cluster.cronchain("apply", str(noop_job_file(cluster.folder / "jobs.yaml", 20, **UP)))
    cluster.start_celery("worker", "worker", "--beat", "--concurrency", "2", "--loglevel", "INFO")
    wait_until(lambda: " ready." in cluster.log("worker"), 60, "the worker to be ready")
    wait_until(lambda: "beat: Starting" in cluster.log("worker"), 60, "beat to start")
    os.killpg(cluster.processes["worker"].pid, signal.SIGTERM)
    assert wait_for_exit(cluster, "worker") == 0


# The stopping policy on its own, on small Python processes and a clock of the test's.

SIGNAL_PRINTER = """
import signal, sys, time
def say(n, f):
    print(signal.Signals(n).name, flush=True)
for s in (signal.SIGTERM, signal.SIGQUIT):
    signal.signal(s, say)
print("ready", flush=True)
time.sleep(60)
"""


def stubborn() -> subprocess.Popen[str]:
    """A child that prints the name of each SIGTERM and SIGQUIT it gets, and ignores it;
    in a process group of its own, as ``supervise`` starts its children."""
    process = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_PRINTER], stdout=subprocess.PIPE, text=True, process_group=0
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_a_second_stop_request_kills_and_is_no_failure(capsys: pytest.CaptureFixture[str]) -> None:
    child = stubborn()
    supervisor = Supervisor(
        {"work": child}, grace=30, clock=lambda: 0.0, waiting=lambda: "1 run(s): p/a"
    )
    assert child.stdout is not None
    requests = [signal.SIGINT]
    assert supervisor.step(requests) == 30
    assert child.stdout.readline() == "SIGTERM\n"
    said = capsys.readouterr().err
    assert "finishing 1 run(s): p/a for at most 30 s; again (Ctrl-C) to stop at once" in said
    requests.append(signal.SIGINT)
    supervisor.step(requests)
    assert child.wait(timeout=5) == -signal.SIGKILL
    assert supervisor.step(requests) is None
    assert supervisor.failures == []


def test_a_path_that_does_not_stop_within_the_grace_is_killed_as_asked() -> None:
    child = stubborn()
    now = [0.0]
    supervisor = Supervisor({"work": child}, grace=30, clock=lambda: now[0])
    assert supervisor.step([signal.SIGTERM]) == 30
    now[0] = 29.0
    assert supervisor.step([signal.SIGTERM]) == 1
    now[0] = 30.0
    supervisor.step([signal.SIGTERM])
    assert child.wait(timeout=5) == -signal.SIGKILL
    assert supervisor.step([signal.SIGTERM]) is None
    assert supervisor.failures == []  # asked to stop, and stopped: exit 0


def test_what_it_waits_for_is_said_even_when_it_cannot_be_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def unknown() -> str:
        raise ConnectionError("the database is away")

    child = stubborn()
    supervisor = Supervisor({"work": child}, grace=5, clock=lambda: 0.0, waiting=unknown)
    supervisor.step([signal.SIGINT])
    said = capsys.readouterr().err
    assert "finishing the runs in hand (which ones, unknown: ConnectionError) for at most" in said
    supervisor.step([signal.SIGINT, signal.SIGINT])
    assert child.wait(timeout=5) == -signal.SIGKILL
