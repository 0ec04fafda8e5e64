"""``gates``: a slot whose upstreams allow it waits (WAITING, ``gate``) until every gate's
latest answer is a yes; each gate is asked every ``every`` on the work path, its answers
kept on the run; ``on_unmet`` applies when no check is left to say yes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.cli.main import _with_wait
from cronchain.scheduler.cli.text import invocation_text
from cronchain.scheduler.core import recording
from cronchain.scheduler.errors import SpecError, TransientError
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.workflows import gates
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import ask_due, run_now, settle
from tests.support.engine import Clock, RecordingPort, http_engine
from tests.support.jobs import apply, spec
from tests.support.metrics import samples
from tests.support.receivers import gate_endpoint
from tests.support.rows import job, rows
from tests.support.upstream import needs

pytestmark = pytest.mark.postgres
S = InvocationStatus


class SentTasks:
    """Where a ``celery`` gate's task goes: kept, as the broker would keep it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append({"task": name, **options})


def both_checks_sent(engine, port: RecordingPort, clock: Clock) -> SentTasks:  # type: ignore[no-untyped-def]
    """A triggered run of ``d``, whose celery gate is asked every 2 s for 3 s: both its
    checks sent, neither answered; the second is the last (a third would be too late)."""
    tasks = SentTasks()
    apply(engine, spec("d", gates=[{"celery": "app.ready", "every": "2s"}], max_wait="3s"))
    Scheduler(engine).trigger("p/d")
    assert ask_due(engine, port, clock, tasks) == 1
    clock.advance(2)
    assert ask_due(engine, port, clock, tasks) == 1
    return tasks


def answers(row: dict[str, Any], gate: int = 0) -> list[bool]:
    return [a["yes"] for a in row["checks"]["gate"]["gates"][gate]["answers"]]


def test_a_gate_that_says_no_twice_then_yes_starts_the_run_after_the_third_check(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(503, 503) as endpoint:
        gate = {"name": "cluster", "http": endpoint.url, "every": "10s"}
        apply(engine, spec("d", "every 60s", gates=[gate], max_wait="10m"))
        clock.now = max(eta for _, _, eta in port.ticks)
        ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
        port.clear()
        engine.tick_many(ticks, start_here=True)
        [d] = rows(engine, "d")
        assert (d["status"], d["reason"]) == ("WAITING", "gate")
        slot = d["slot"]
        assert ask_due(engine, port, clock) == 1 and answers(rows(engine, "d")[0]) == [False]
        assert ask_due(engine, port, clock) == 0  # the next check is due in 10 s
        waiting = Scheduler(engine).explain("p/d", slot)
        assert waiting["answer"] == "waiting"
        assert "gate cluster said no at check 1" in waiting["text"], waiting["text"]
        assert "answered 503" in waiting["text"]
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1
        assert rows(engine, "d")[0]["status"] == "WAITING"
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1  # the third check: yes
        [d] = rows(engine, "d")
        assert d["status"] == "RUNNING" and answers(d) == [False, False, True]
        assert port.start_messages == []  # begun where the yes was recorded
        assert len(endpoint.asked) == 3
        settle(engine, port)
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1  # check 4, sent before 3 said yes
    [d] = rows(engine, "d")
    assert d["status"] == "SUCCEEDED" and len(endpoint.asked) == 3  # not asked again
    state = d["checks"]["gate"]
    assert state["gates"][0]["checks"] == 3 and state["released_at"] is not None
    assert [a["check"] for a in state["gates"][0]["answers"]] == [1, 2, 3]
    assert _with_wait(d)["reason"] == f"gate (waited until {state['released_at']})"
    ran = Scheduler(engine).explain("p/d", slot)
    assert ran["answer"] == "ran" and "it waited for its gates from" in ran["text"]
    assert "gate cluster said yes at check 3" in ran["text"]
    assert [a["yes"] for a in ran["gates"][0]["answers"]] == [False, False, True]
    text = invocation_text(Scheduler(engine).invocation(d["id"]))
    assert "gate cluster check 2 at" in text and "no, answered 503: not ready" in text


@pytest.mark.parametrize("on_unmet", ["skip", "fail", "run"])
def test_a_gate_that_never_answers_in_time_ends_the_slot_by_on_unmet(
    db: sqlalchemy.Engine, clock: Clock, on_unmet: str
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=0) as endpoint:  # every GET hangs
        gate = {"http": {"url": endpoint.url, "timeout": "0.3s"}, "every": "2s"}
        apply(engine, spec("d", gates=[gate], max_wait="5s", on_unmet=on_unmet))
        Scheduler(engine).trigger("p/d")
        for _ in range(3):  # checks at 0, 2 and 4 s: the one at 6 s would be too late
            assert ask_due(engine, port, clock) == 1
            clock.advance(2)
        assert port.gates == []
    [d] = rows(engine, "d")
    assert answers(d) == [False, False, False]
    assert "no answer within 0.3s" in d["checks"]["gate"]["gates"][0]["answers"][-1]["said"]
    if on_unmet == "run":
        settle(engine, port)
        assert rows(engine, "d")[0]["status"] == "SUCCEEDED"
        return
    ended = {"skip": "SKIPPED", "fail": "FAILED"}[on_unmet]
    assert (d["status"], d["reason"]) == (ended, "gate")
    assert "gates not passed by" in d["error"] and "no answer within 0.3s" in d["error"]
    assert job(engine, "p/d").snapshot.active == 0


def test_a_celery_gate_says_yes_by_returning_true(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    tasks = SentTasks()
    gate = {"celery": {"task": "app.ready", "queue": "checks", "args": [8]}, "every": "5s"}
    apply(engine, spec("d", gates=[gate]))
    Scheduler(engine).trigger("p/d")
    assert ask_due(engine, port, clock, tasks) == 1
    [sent] = tasks.sent
    header = sent["headers"]["cronchain_gate"]
    d = rows(engine, "d")[0]
    assert (sent["task"], sent["queue"], sent["args"]) == ("app.ready", "checks", [8])
    assert header == {"invocation": d["id"], "gate": "app.ready", "check": 1, "job": d["job_id"]}
    # What the hooks record of the task's return (scheduler.workers.hooks): not True, no.
    gates.answer(engine, d["id"], "app.ready", 1, d["job_id"], False, "returned 'ok'")
    clock.advance(5)
    assert ask_due(engine, port, clock, tasks) == 1
    gates.answer(engine, d["id"], "app.ready", 2, d["job_id"], True, "returned True")
    gates.answer(engine, d["id"], "app.ready", 1, d["job_id"], True, "late")  # older: dropped
    [d] = rows(engine, "d")
    assert d["status"] == "RUNNING" and answers(d) == [False, True]


def test_a_celery_gate_that_never_answers_is_settled_by_the_watchdog(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    both_checks_sent(engine, port, clock)
    assert port.gates == [] and rows(engine, "d")[0]["status"] == "WAITING"
    clock.advance(1.5)
    report = watchdog.run_once(engine)
    assert report.settled == 1
    [d] = rows(engine, "d")
    assert (d["status"], d["reason"]) == ("SKIPPED", "gate")
    assert "gate app.ready: no answer to 2 check(s)" in d["error"]
    gates.answer(engine, d["id"], "app.ready", 2, d["job_id"], True, "returned True")  # too late
    assert rows(engine, "d")[0]["status"] == "SKIPPED"


def test_a_lost_check_is_asked_again_by_the_watchdog(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    with gate_endpoint(503) as endpoint:
        apply(engine, spec("d", gates=[{"http": endpoint.url, "every": "10s"}]))
        Scheduler(engine).trigger("p/d")
        port.gates.clear()  # the first check's message is lost
        clock.advance(engine.repair_grace.total_seconds() + 1)
        report = watchdog.run_once(engine)
        assert report.asked == 1 and [g[2] for g in port.gates] == [1]
        assert ask_due(engine, port, clock) == 1  # no
        port.gates.clear()  # and so is the second's
        assert watchdog.run_once(engine).asked == 0  # not due yet
        clock.advance(10 + engine.repair_grace.total_seconds() + 1)
        watchdog.run_once(engine)
        port.gates.append(port.gates[0])  # the lost one turns up as well: a copy
        assert ask_due(engine, port, clock) == 2
    assert answers(rows(engine, "d")[0]) == [False, True]
    assert len(endpoint.asked) == 2 and rows(engine, "d")[0]["status"] == "RUNNING"


def test_gates_are_asked_once_the_upstreams_are_met(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    with gate_endpoint() as endpoint:
        gate = {"http": endpoint.url, "every": "10s"}
        apply(engine, spec("a"), spec("d", gates=[gate], **needs("a", max_wait="1h")))
        Scheduler(engine).trigger("p/d")
        assert rows(engine, "d")[0]["reason"] == "upstream" and port.gates == []
        run_now(engine, port, "a")
        assert rows(engine, "d")[0]["reason"] == "gate"
        assert ask_due(engine, port, clock) == 1
        settle(engine, port)
    [d] = rows(engine, "d")
    assert d["status"] == "SUCCEEDED"
    assert d["checks"]["upstream"][0]["met"] and d["checks"]["gate"]["released_at"]


def test_abort_ends_a_run_waiting_for_its_gates(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    with gate_endpoint() as endpoint:
        apply(engine, spec("d", gates=[{"http": endpoint.url}]))
        Scheduler(engine).trigger("p/d")
        aborted = Scheduler(engine).abort("p/d")
        assert len(aborted["WAITING"]) == 1
        assert ask_due(engine, port, clock) == 1  # the check finds nothing to ask for
        assert endpoint.asked == []
    assert rows(engine, "d")[0]["status"] == "ABORTED"
    assert job(engine, "p/d").snapshot.active == 0


def test_a_backfill_slot_is_asked_once(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    with gate_endpoint(503) as endpoint:
        apply(engine, spec("d", "0 3 * * *", gates=[{"http": endpoint.url, "every": "1m"}]))
        first, last = datetime(2026, 2, 25, tzinfo=UTC), datetime(2026, 2, 26, 23, tzinfo=UTC)
        Scheduler(engine).backfill("p/d", first, last, max_concurrent=2)
        assert ask_due(engine, port, clock) == 2  # one says no, one yes
        assert port.gates == []  # a slot long past gets one check, its last
    settle(engine, port)
    by_day = {r["slot"].day: (r["status"], r["reason"]) for r in rows(engine, "d")}
    assert sorted(by_day.values()) == [("SKIPPED", "gate"), ("SUCCEEDED", None)]


def test_gates_are_validated_naming_the_field() -> None:
    with pytest.raises(SpecError, match="gates: each gate is exactly one of http: or celery:"):
        spec("d", gates=[{"every": "1m"}])
    with pytest.raises(SpecError, match="gates.http.timeout: must not be longer than"):
        spec("d", gates=[{"http": {"url": "http://a/", "timeout": "2m"}, "every": "1m"}])
    with pytest.raises(SpecError, match="two gates are named 'a'"):
        spec("d", gates=[{"http": "http://a/x"}, {"http": "http://a/y"}])
    with pytest.raises(SpecError, match="gates.every: must be at least 1s"):
        spec("d", gates=[{"http": "http://a/", "every": "0.5s"}])
    with pytest.raises(SpecError, match="max_wait: only applies with requires or gates"):
        spec("d", max_wait="1h")


def test_an_older_check_s_late_no_does_not_end_the_slot_while_the_last_is_asked(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    both_checks_sent(engine, port, clock)
    d = rows(engine, "d")[0]
    gates.answer(engine, d["id"], "app.ready", 1, d["job_id"], False, "returned False")  # late
    assert rows(engine, "d")[0]["status"] == "WAITING"
    gates.answer(engine, d["id"], "app.ready", 2, d["job_id"], True, "returned True")
    assert rows(engine, "d")[0]["status"] == "RUNNING"


def test_a_waiting_run_follows_its_job_s_gates_when_they_change(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=503) as endpoint:
        apply(engine, spec("d", gates=[{"name": "ready", "http": endpoint.url, "every": "10s"}]))
        Scheduler(engine).trigger("p/d")
        assert ask_due(engine, port, clock) == 1  # no
        renamed = {"name": "ready2", "http": endpoint.url, "every": "10s"}
        apply(engine, spec("d", gates=[renamed]))
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1  # "ready" is gone; "ready2" asked first
        assert ask_due(engine, port, clock) == 1
        [d] = rows(engine, "d")
        assert d["status"] == "WAITING" and len(endpoint.asked) == 2
        assert [g["name"] for g in d["checks"]["gate"]["gates"]] == ["ready2"]
        assert answers(d) == [False]
        endpoint.then = 200
        apply(engine, spec("d", gates=[renamed, {"name": "more", "http": endpoint.url}]))
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1  # ready2 says yes; more is asked first
        assert rows(engine, "d")[0]["status"] == "WAITING"
        assert ask_due(engine, port, clock) == 1
    assert rows(engine, "d")[0]["status"] == "RUNNING"


def test_a_gate_removed_from_the_job_releases_a_run_that_waited_only_for_it(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=503) as endpoint:
        apply(engine, spec("d", gates=[{"http": endpoint.url, "every": "10s"}]))
        Scheduler(engine).trigger("p/d")
        assert ask_due(engine, port, clock) == 1
        apply(engine, spec("d"))  # no gates any more
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1
    assert rows(engine, "d")[0]["status"] == "STARTING" and len(endpoint.asked) == 1


def test_the_watchdog_finds_a_lost_check_past_its_first_limit_of_runs(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=503) as endpoint:
        every = [{"http": endpoint.url, "every": "1h"}]
        apply(engine, spec("a", gates=every, max_wait="1d"), spec("b", gates=every, max_wait="1d"))
        Scheduler(engine).trigger("p/a")
        assert ask_due(engine, port, clock) == 1  # a is asked again in an hour
        port.gates.clear()
        Scheduler(engine).trigger("p/b")
        port.gates.clear()  # b's first check is lost
        clock.advance(engine.repair_grace.total_seconds() + 1)
        assert watchdog.run_once(engine, limit=1).asked == 1


def test_an_answer_is_recorded_patiently_when_the_database_blips(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    engine, port = http_engine(db, clock)
    real, failures = gates.answer, [TransientError("database unavailable")]

    def blip(*args: Any) -> None:
        if failures:
            raise failures.pop()
        real(*args)

    monkeypatch.setattr(recording, "RETRY_DELAYS", (0,))
    monkeypatch.setattr(gates, "answer", blip)
    with gate_endpoint() as endpoint:
        apply(engine, spec("d", gates=[{"http": endpoint.url, "every": "10s"}], max_wait="5s"))
        Scheduler(engine).trigger("p/d")
        assert ask_due(engine, port, clock) == 1
    assert rows(engine, "d")[0]["status"] == "RUNNING" and not failures


def test_a_second_backfill_counts_the_first_s_gated_run_as_in_flight(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=503) as endpoint:
        gate = [{"http": endpoint.url, "every": "1m"}]
        apply(engine, spec("d", "0 3 * * *", gates=gate, max_wait="1d"))
        sched = Scheduler(engine)
        for day in (25, 26):
            first, last = datetime(2026, 2, day, tzinfo=UTC), datetime(2026, 2, day, 23, tzinfo=UTC)
            sched.backfill("p/d", first, last, max_concurrent=1)
    assert [r["reason"] for r in rows(engine, "d")].count("gate") == 1


def test_a_trigger_of_a_gated_job_says_waiting_and_metrics_count_it(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, _ = http_engine(db, clock)
    apply(engine, spec("d", gates=[{"http": "http://127.0.0.1:9/", "every": "10s"}]))
    assert Scheduler(engine).trigger("p/d")["result"] == "waiting"
    assert samples(engine.db, clock)["cronchain_runs_waiting", (("reason", "gate"),)] == 1


def test_the_command_line_says_what_a_triggered_run_waits_for(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    engine, _ = http_engine(db, clock)
    apply(engine, spec("d", gates=[{"http": "http://127.0.0.1:9/", "every": "10s"}]))
    code, out, _ = cli(engine, "trigger", "p/d")
    assert code == 0 and "is WAITING for its gates;" in out


def test_a_gate_that_said_no_dropped_by_an_apply_frees_a_run_whose_other_gate_said_yes(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with gate_endpoint(then=503) as no, gate_endpoint() as yes:
        both = [{"name": "no", "http": no.url, "every": "10s"}]
        both.append({"name": "yes", "http": yes.url, "every": "1h"})
        apply(engine, spec("d", gates=both, max_wait="2h"))
        Scheduler(engine).trigger("p/d")
        assert ask_due(engine, port, clock) == 2
        assert rows(engine, "d")[0]["status"] == "WAITING"
        apply(engine, spec("d", gates=both[1:], max_wait="2h"))  # "no" is no longer a gate
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1  # the dropped gate's check: frees the run
    assert rows(engine, "d")[0]["status"] == "STARTING" and len(no.asked) == 1


def test_a_check_due_past_the_horizon_waits_in_hops(db: sqlalchemy.Engine, clock: Clock):
    """A gate asked every hour: its next check's message is held no longer than a
    tick's (the horizon), and one delivered before its time sends itself on rather
    than asking early. A broker drops a message held longer: RabbitMQ closes the
    worker's channel (its consumer_timeout), Redis delivers it again (its visibility
    timeout)."""
    engine, port = http_engine(db, clock)
    with gate_endpoint(503, 503) as endpoint:
        apply(engine, spec("d", gates=[{"http": endpoint.url, "every": "1h"}], max_wait="3h"))
        Scheduler(engine).trigger("p/d")
        assert ask_due(engine, port, clock) == 1 and len(endpoint.asked) == 1
        first = clock.now
        hops = 0
        while len(endpoint.asked) == 1:
            [(_, _, number, _, eta)] = port.gates
            assert number == 2 and clock.now < eta <= clock.now + engine.horizon
            clock.now = eta
            assert ask_due(engine, port, clock) == 1
            hops += 1
        assert clock.now >= first + timedelta(hours=1) and hops == 12
    assert answers(rows(engine, "d")[0]) == [False, False]
