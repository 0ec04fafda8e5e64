"""/metrics and the health checks, computed from real databases (SQLite and PostgreSQL)
with a fixed clock: what each metric says after real steps of the engine, the checks
that fail and why, and (PostgreSQL, 10,000 jobs) that every query reads an index."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy
from celery import Celery

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.invokers.call import SUCCEEDED
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import observed
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import JOB_STATES
from cronchain.scheduler.version import VERSION
from cronchain.scheduler.web import metrics
from cronchain.scheduler.web.health import WorkerWatch, check_health
from cronchain.scheduler.web.metrics import DatabaseCollector, render
from cronchain.scheduler.workers.runtime import patience_of_a_command
from tests.support.deliver import deliver_runs, deliver_ticks_and_starts
from tests.support.engine import Clock, RecordingPort
from tests.support.metrics import INTERVAL, parsed, samples, settings
from tests.support.plans import fill_registry
from tests.support.wait import wait_until

pytestmark = pytest.mark.postgres


def of(job: str) -> tuple[tuple[str, str], ...]:
    """A job's labels, as ``samples`` keys them."""
    return (("job_name", job), ("project", "p"))


def job(name: str, schedule: str = "every 10s", **controls: Any) -> JobSpec:
    return JobSpec("p", name, schedule, kind="noop", controls=controls)


def test_metrics_say_what_the_engine_did(engine: Engine, port: RecordingPort, clock: Clock):
    start = clock.now
    Scheduler(engine).apply(
        [job("ok"), job("held", overlap="buffer_one"), job("off", paused=True)], project="p"
    )
    before = samples(engine.db, clock)
    success = "cronchain_job_last_success_timestamp_seconds"
    next_tick = "cronchain_job_next_tick_timestamp_seconds"
    assert before[success, of("ok")] == 0  # never succeeded: 0, not absent
    assert before["cronchain_job_state", (*of("off"), ("state", "SUSPENDED"))] == 1
    assert before["cronchain_job_state", (*of("ok"), ("state", "SCHEDULED"))] == 1
    states = {
        k[1][2][1]: v
        for k, v in before.items()
        if k[0] == "cronchain_job_state" and k[1][:2] == of("ok")
    }
    assert states == dict.fromkeys(JOB_STATES, 0) | {"SCHEDULED": 1}  # a series per state
    assert before["cronchain_jobs", (("state", "SCHEDULED"),)] == 2
    assert before["cronchain_build_info", (("version", VERSION),)] == 1
    assert (next_tick, of("off")) not in before  # paused: no tick
    assert before["cronchain_watchdog_last_pass_timestamp_seconds", ()] == 0

    clock.advance(10)  # both fire; only "ok"'s run is done, "held"'s stays RUNNING
    deliver_ticks_and_starts(engine, port)
    held = [c for c in port.runs if c.job.endswith("held")]
    port.runs[:] = [c for c in port.runs if c not in held]
    deliver_runs(engine, port)
    done_at = clock.now
    clock.advance(10)  # "held"'s next slot waits for its place (buffer_one)
    deliver_ticks_and_starts(engine, port)
    port.clear()  # the ticks are lost: the watchdog will repair them
    clock.advance(26)  # 16 s past the ticks' slots: more than the grace (15 s)
    now = samples(engine.db, clock)
    assert now[success, of("ok")] == done_at.timestamp()
    assert now[success, of("held")] == 0
    assert now[next_tick, of("ok")] == (start + timedelta(seconds=30)).timestamp()
    assert now["cronchain_runs_waiting", (("reason", "buffered"),)] == 1
    assert now["cronchain_runs_waiting", (("reason", "backfill"),)] == 0
    assert now["cronchain_overdue_ticks", ()] == 2
    assert now["cronchain_overdue_tick_seconds", ()] == 16  # the slot was 16 s ago

    watchdog.sweep(engine, budget=5)
    after = samples(engine.db, clock)
    assert after["cronchain_watchdog_last_pass_timestamp_seconds", ()] == clock.now.timestamp()
    assert after["cronchain_watchdog_repairs_total", (("kind", "ticks"),)] == 2
    watchdog.sweep(engine, budget=5)  # counts add up; the pass's time moves
    assert samples(engine.db, clock)["cronchain_watchdog_repairs_total", (("kind", "ticks"),)] == 2


def test_each_job_counts_its_failures_and_its_run_time(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """Migration 0014's trigger, on the job's row: a run that ends FAILED counts, with
    when; a run that started adds its time from the claim to the end (a summary); one
    that failed without starting (its upstream never succeeded) counts, untimed."""
    scheduler = Scheduler(engine)
    unmet = {"requires": [{"job": "n", "succeeded_within": "1h"}], "max_wait": "10s"}
    unmet["on_unmet"] = "fail"
    specs = [job("c", "triggered"), job("n", "triggered"), job("d", "triggered", **unmet)]
    scheduler.apply(specs, project="p")
    outcomes = [SUCCEEDED, Outcome.failed("boom", "error")]
    for seconds, outcome in zip((7, 2), outcomes, strict=True):
        scheduler.trigger("p/c")
        deliver_ticks_and_starts(engine, port)  # the start, sent to the work path
        [call] = port.runs
        port.runs.clear()
        assert engine.attempts.claim(call.invocation_id, call.attempt, "w") is not None
        clock.advance(seconds)
        engine.runs.record_patiently(call.invocation_id, call.attempt, outcome)
    failed_at = clock.now
    clock.advance(60)
    scheduler.trigger("p/d")  # waits for n's success within the hour, which never comes
    clock.advance(11)
    watchdog.run_once(engine)  # max_wait passed: FAILED, never started
    found = samples(engine.db, clock)
    assert found["cronchain_job_failures_total", of("c")] == 1
    assert found["cronchain_job_last_failure_timestamp_seconds", of("c")] == failed_at.timestamp()
    assert found["cronchain_job_run_duration_seconds_count", of("c")] == 2
    assert found["cronchain_job_run_duration_seconds_sum", of("c")] == pytest.approx(9, abs=1e-3)
    assert found["cronchain_job_failures_total", of("d")] == 1
    assert found["cronchain_job_run_duration_seconds_count", of("d")] == 0
    assert found["cronchain_job_last_success_timestamp_seconds", of("d")] == 0


def test_per_job_series_can_be_turned_off(engine: Engine, clock: Clock):
    Scheduler(engine).apply([job("a"), job("b", paused=True)], project="p")
    quiet = settings(engine.db, metrics_per_job=False)
    found = parsed(render(DatabaseCollector(engine.db, quiet, now=clock)).decode())
    assert not [name for name, _ in found if name.startswith("cronchain_job_")]
    assert found["cronchain_jobs", (("state", "SCHEDULED"),)] == 1
    assert found["cronchain_jobs", (("state", "SUSPENDED"),)] == 1
    assert found["cronchain_jobs", (("state", "DISABLED"),)] == 0
    assert Settings.from_env({"CRONCHAIN_METRICS_PER_JOB": "off"}).metrics_per_job is False


def test_a_slow_count_of_the_jobs_by_state_is_kept_and_counted_again_beside_the_scrapes(
    engine: Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """Without per-job series, counting the jobs by state is most of a scrape of a
    large registry: a slow count is kept for a minute, then a scrape answers with it and
    has it counted again on a thread; a quick one is never kept."""
    sched = Scheduler(engine)
    sched.apply([job("a")], project="p")
    collector = DatabaseCollector(engine.db, settings(engine.db, metrics_per_job=False), clock)

    def scheduled() -> float:
        return parsed(render(collector).decode())["cronchain_jobs", (("state", "SCHEDULED"),)]

    monkeypatch.setattr(metrics, "SLOW_COUNT", 10.0)  # however loaded the machine
    assert scheduled() == 1
    sched.apply([job("a"), job("b")], project="p")
    assert scheduled() == 2  # quick: counted again
    monkeypatch.setattr(metrics, "SLOW_COUNT", -1.0)  # as slow as a million jobs' count
    assert scheduled() == 2
    sched.apply([job("a"), job("b"), job("c")], project="p")
    assert scheduled() == 2  # kept
    clock.advance(metrics.STALE_COUNT.total_seconds())
    counted = threading.Event()
    count = observed.jobs_by_state

    def held(conn: Any) -> dict[str, int]:
        counted.wait(10)  # until the stale scrape has answered
        return count(conn)

    monkeypatch.setattr(observed, "jobs_by_state", held)
    assert scheduled() == 2  # stale: answered at once, counted again beside it
    counted.set()
    wait_until(lambda: scheduled() == 3, 10, "the count again")


def test_each_run_that_ends_and_each_first_claim_is_counted_once(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """The counters of migration 0008's triggers say what the history says, whatever
    path ended the run: an outcome recorded, a skip inserted by the tick, an abort, a
    triggered run, a backfill. The lag is counted at the first claim of a slot's first
    attempt only: not a backfill's, not a triggered run's, not a retry's."""
    scheduler = Scheduler(engine)
    retried = {"retries": {"max_attempts": 2, "backoff": 1, "jitter": 0}}
    scheduler.apply(
        [
            job("ok"),
            JobSpec("p", "bad", "every 10s", kind="noop", options={"fail": True}, controls=retried),
            job("slow", overlap="skip"),
            job("manual", "triggered"),
        ],
        project="p",
    )
    clock.advance(10)  # the first slot: claimed 3 s after it ("slow"'s never)
    deliver_ticks_and_starts(engine, port)
    slow = [c for c in port.runs if c.job.endswith("slow")]
    port.runs[:] = [c for c in port.runs if c not in slow]
    clock.advance(3)
    deliver_runs(engine, port)  # "ok" succeeds; "bad"'s first attempt fails
    clock.advance(2)
    deliver_ticks_and_starts(engine, port)  # "bad"'s second attempt, which fails for good
    deliver_runs(engine, port)
    scheduler.pause("p/ok")
    scheduler.pause("p/bad")
    clock.advance(5)  # the second slot: "slow" still runs its first, and skips this one
    deliver_ticks_and_starts(engine, port)
    scheduler.abort("p/slow")
    scheduler.trigger("p/manual")
    deliver_runs(engine, port)
    scheduler.backfill("p/ok", clock.now - timedelta(seconds=60), clock.now - timedelta(seconds=50))
    deliver_ticks_and_starts(engine, port)
    deliver_runs(engine, port)

    with engine.db.connect() as conn:
        history = conn.exec_driver_sql(
            "SELECT status, COALESCE(reason, ''), count(*) FROM invocations"
            " WHERE status IN ('SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED')"
            " GROUP BY status, COALESCE(reason, '')"
        )
        ended = {(status, reason): count for status, reason, count in history}
    assert ended == {
        ("SUCCEEDED", ""): 3,  # "ok"'s slot, the triggered run, a backfilled slot
        ("FAILED", ""): 1,  # "bad"'s slot, once, after two attempts
        ("SKIPPED", "overlap"): 1,
        ("ABORTED", "aborted"): 1,
    }
    found = samples(engine.db, clock)
    slots = {
        (dict(labels)["outcome"], dict(labels)["reason"]): value
        for (name, labels), value in found.items()
        if name == "cronchain_slots_total"
    }
    assert slots == ended
    lags = "cronchain_fire_lag_seconds"
    assert found[lags + "_count", ()] == 2  # "ok"'s and "bad"'s first slot, 3 s late
    assert found[lags + "_sum", ()] == pytest.approx(6.0, abs=1e-3)  # SQLite: julianday
    assert found[lags + "_bucket", (("le", "2.5"),)] == 0
    assert found[lags + "_bucket", (("le", "5"),)] == 2
    assert found[lags + "_bucket", (("le", "+Inf"),)] == 2


def test_counters_of_exited_backends_fold_into_one_row(pg_url: str):
    """The watchdog folds the counter rows of PostgreSQL backends gone into shard 0:
    the sums /metrics reads do not change, and the live backends' rows stay."""
    db = make_engine(pg_url)
    with db.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO slot_outcomes (status, reason, shard, count) VALUES"
            " ('FAILED', '', 0, 5), ('FAILED', '', -1, 2), ('FAILED', '', -2, 1),"
            " ('SKIPPED', 'overlap', -1, 4), ('SUCCEEDED', '', pg_backend_pid(), 7)"
        )
        conn.exec_driver_sql(
            "INSERT INTO fire_lags (le, shard, count, seconds) VALUES"
            " ('1', -1, 3, 1.5), ('1', -2, 1, 0.25), ('+Inf', -1, 1, 1200.0)"
        )
    with db.connect() as conn:
        before = observed.slots_by_outcome(conn), observed.fire_lag_histogram(conn)
    with db.begin() as conn:
        live = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        observed.fold_counters(conn)
        shards = conn.exec_driver_sql("SELECT DISTINCT shard FROM slot_outcomes").scalars()
        assert sorted(shards) == sorted({0, live})
        lag_shards = conn.exec_driver_sql("SELECT DISTINCT shard FROM fire_lags").scalars()
        assert list(lag_shards) == [0]
    with db.connect() as conn:
        assert (observed.slots_by_outcome(conn), observed.fire_lag_histogram(conn)) == before
    assert before[0] == {("FAILED", ""): 8, ("SKIPPED", "overlap"): 4, ("SUCCEEDED", ""): 7}
    db.dispose()


def test_health_names_each_check_that_fails(engine: Engine, port: RecordingPort, clock: Clock):
    """No broker and no workers here: those checks fail with the reason; the database's
    say what the watchdog and the ticks do, with the clock."""
    Scheduler(engine).apply([job("a")], project="p")
    conf = settings(engine.db)
    app = patience_of_a_command(Celery("cronchain", broker=conf.broker_url))
    health = check_health(engine.db, app, conf, now=clock)
    assert not health.ok
    assert health.failed == ["broker", "watchdog", "control_path", "work_path"]
    body = health.as_json()["checks"]
    assert body["database"]["ok"] and body["ticks"]["ok"]
    assert "never passed" in body["watchdog"]["detail"]
    assert conf.broker_url.removeprefix("redis://") in body["broker"]["detail"]

    watchdog.sweep(engine, budget=5)  # beat's watchdog passes now
    clock.advance(10 + 15 + 2 * INTERVAL + 1)  # the tick's slot, its grace, the limit, 1 s
    checks = check_health(engine.db, app, conf, now=clock).as_json()["checks"]
    assert "last pass 86 s ago, more than two intervals (60 s)" in checks["watchdog"]["detail"]
    assert not checks["ticks"]["ok"]
    assert checks["ticks"]["detail"] == "1 overdue, the oldest 61 s past its grace (more than 60 s)"
    loose = settings(engine.db, overdue_limit=70.0)
    assert check_health(engine.db, app, loose, now=clock).as_json()["checks"]["ticks"]["ok"]


NOT_YET = "not checked yet: cronchain serve has just started"


def test_healthz_reads_the_workers_as_its_watch_last_saw_them(engine: Engine, clock: Clock):
    """/healthz's broker and workers come from a thread's last look (Celery's inspect
    waits a second for replies): before its first look they fail as not checked; then
    they say how old they are; an answer older than three looks fails."""
    conf = settings(engine.db, broker_url="redis://127.0.0.1:6379/15")  # the machine's
    app = patience_of_a_command(Celery("cronchain", broker=conf.broker_url))
    ticks = [100.0]
    watch = WorkerWatch(app, conf, every=10.0, clock=lambda: ticks[0])
    checks = check_health(engine.db, app, conf, now=clock, watch=watch).as_json()["checks"]
    assert checks["broker"] == {"ok": False, "detail": NOT_YET}
    assert checks["database"]["ok"]  # asked then, as every request asks it
    watch.look()
    ticks[0] += 12
    checks = check_health(engine.db, app, conf, now=clock, watch=watch).as_json()["checks"]
    assert checks["broker"]["ok"] and checks["broker"]["detail"].endswith("(12 s ago)")
    assert not checks["control_path"]["ok"]  # no worker consumes the queue
    assert checks["control_path"]["detail"].endswith("(12 s ago)")
    ticks[0] += 20
    checks = check_health(engine.db, app, conf, now=clock, watch=watch).as_json()["checks"]
    assert checks["broker"] == {"ok": False, "detail": "not checked for 32 s"}


def test_every_query_reads_an_index(pg_url: str, clock: Clock):
    """10,000 jobs and 20,000 runs on PostgreSQL (the plans that matter): the scrape's
    and the health check's queries never scan the history."""
    db = make_engine(pg_url)
    fill_registry(db, 10_000, runs_each=2)
    statements = _statements(db, clock)
    assert set(statements) == {"overdue_ticks", "waiting_by_reason", "watchdog_passes"}
    with db.connect() as conn:
        # Partitions that hold rows (the planner rightly scans an empty one whole).
        query = "SELECT DISTINCT tableoid::regclass::text FROM invocations"
        filled = [name for (name,) in conn.exec_driver_sql(query)]
        assert filled
        for name, (statement, parameters) in statements.items():
            plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters))
            scanned = {*re.findall(r"Seq Scan on (\w+)", plan)}
            assert not scanned & {"jobs", "invocations", *filled}, (name, plan)
            assert "Index" in plan or name == "watchdog_passes", (name, plan)  # one row
    db.dispose()


def _statements(db: sqlalchemy.Engine, clock: Clock) -> dict[str, tuple[str, Any]]:
    """The SQL and parameters of each query the health check and a scrape run but the
    one that lists every job (that one reads the registry whole, by design)."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    found = {}
    with db.connect() as conn:
        sqlalchemy.event.listen(conn, "before_cursor_execute", record)
        for name, query in (
            ("overdue_ticks", lambda: observed.overdue_ticks(conn, clock.now)),
            ("waiting_by_reason", lambda: observed.waiting_by_reason(conn)),
            ("watchdog_passes", lambda: observed.watchdog_passes(conn)),
        ):
            query()
            found[name] = seen.pop()
    return found
