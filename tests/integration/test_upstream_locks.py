"""Transactions of ``requires`` and pools that meet: none waits for another in a cycle
(PostgreSQL would end one as a deadlock), and none leaves a run waiting that may start.
Each test holds one side open in a thread while the other runs."""

from __future__ import annotations

import threading

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.core import admission
from cronchain.scheduler.core.host import Admitting
from cronchain.scheduler.core.outcome_batch import Report, finish_together
from cronchain.scheduler.core.rechecks import Rechecks
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.workflows import upstream, upstream_waits
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import deliver
from tests.support.engine import Clock, Scripted, engine_with
from tests.support.jobs import apply, apply_with_pools, spec
from tests.support.locks import wait_for_lock_wait
from tests.support.rows import job, rows
from tests.support.upstream import d_waits_for_a_and_b_running, needs, tick_batch_holding
from tests.support.wait import wait_until

pytestmark = pytest.mark.postgres
S = InvocationStatus


def admit(engine, conn, job, now):  # type: ignore[no-untyped-def]
    """What the admission chain says of a run of ``job`` filed now, as a tick asks."""
    return admission.admit(engine.plugins.holds, conn, Admitting(job, now), now)


class HeldSuccess:
    """A run's success recorded in a transaction that a thread holds open (``locked``
    once it holds the rows) until ``finish``; what it sends goes out after commit."""

    def __init__(self, engine, run_id: int, clock: Clock):  # type: ignore[no-untyped-def]
        self.locked, self._release, self.errors = threading.Event(), threading.Event(), []
        self._thread = threading.Thread(target=self._succeed, args=(engine, run_id, clock))
        self._thread.start()

    def _succeed(self, engine, run_id: int, clock: Clock) -> None:  # type: ignore[no-untyped-def]
        try:
            with engine.transaction() as conn:
                locked = engine.lock(conn, run_id)
                fed = engine.runs.record_outcome(conn, *locked, Outcome(S.SUCCEEDED), clock.now)
                self.locked.set()
                self._release.wait(10)
            engine.send(fed.messages)
        except Exception as err:
            self.errors.append(err)

    def finish(self) -> None:
        self._release.set()
        self._thread.join()


def test_recheck_vs_batch_deadlock(pg_url: str, clock: Clock):
    """upstream_waits.look_again(d): d's job row, d's waiting run, then unmet v, which a recheck
    once took FOR SHARE, waiting (now it skips a held upstream and looks again later).
    A tick batch locks its jobs in id order: v, then d. Neither may deadlock."""
    engine, port = engine_with(make_engine(pg_url), clock)
    apply(engine, spec("v"), spec("d", **needs("v")))
    v, d = job(engine, "p/v"), job(engine, "p/d")
    assert v.id < d.id
    Scheduler(engine).trigger("p/d")
    assert rows(engine, "d")[0]["status"] == "WAITING"
    through = threading.Event()  # the recheck skips v, which the batch holds
    t, errors = tick_batch_holding(engine, v.id, d.id, through)
    try:  # the body of upstream_waits.look_again's second transaction, which logs what it raises
        with engine.transaction() as conn:
            jd = job_store.lock_job(conn, d.id)
            upstream.recheck(engine, conn, jd, clock.now)
    except Exception as err:
        errors.append(err)
    through.set()
    t.join()
    assert errors == []


def test_two_batches_share_each_other(pg_url: str, clock: Clock):
    """Batch 1 holds d1 and u2 and checks d1 (requires u1, unmet): FOR SHARE u1.
    Batch 2 holds d2 and u1 and checks d2 (requires u2, unmet): FOR SHARE u2."""
    engine, port = engine_with(make_engine(pg_url), clock)
    apply(engine, spec("u1"), spec("u2"), spec("d1", **needs("u1")), spec("d2", **needs("u2")))
    u1, u2, d1, d2 = (job(engine, f"p/{n}") for n in ("u1", "u2", "d1", "d2"))
    barrier, errors = threading.Barrier(2), []

    def batch(ids, checked):
        try:
            with engine.transaction() as conn:
                locked = job_store.lock_jobs(conn, ids)
                barrier.wait(5)
                admit(engine, conn, locked[checked], clock.now)
        except Exception as err:
            errors.append(err)

    ts = [
        threading.Thread(target=batch, args=([d1.id, u2.id], d1.id)),
        threading.Thread(target=batch, args=([d2.id, u1.id], d2.id)),
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_epq_lock_kept_strands_pool_waiter(pg_url: str, clock: Clock):
    """a's success releases d's run into pool gp (WAITING/pool). A recheck of d that read
    the run WAITING/upstream before a's commit locks its new version (which no longer
    matches) and keeps that lock: the Fill after a's commit skips it."""
    engine, port = engine_with(make_engine(pg_url), clock, Scripted(None))
    apply_with_pools(engine, spec("a"), spec("d", pool="gp", **needs("a")), pools={"gp": 1})
    d = job(engine, "p/d")
    Scheduler(engine).trigger("p/d")
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a claimed, worker died
    [a_run] = rows(engine, "a")
    [r] = rows(engine, "d")
    assert (r["status"], r["reason"]) == ("WAITING", "upstream")
    a = HeldSuccess(engine, a_run["id"], clock)  # its send fills gp
    errors = a.errors

    def recheck():
        try:
            upstream_waits.look_again(engine, [d.id])  # waits for a's transaction, then looks
        except Exception as err:
            errors.append(err)

    a.locked.wait(5)
    tr = threading.Thread(target=recheck)
    tr.start()
    wait_for_lock_wait(engine.db, "the recheck to wait for r's lock")
    a.finish()
    tr.join()
    [r] = rows(engine, "d")
    assert errors == []
    assert r["status"] == "STARTING", "stranded until the watchdog"


def group_meets(pg_url: str, clock: Clock, monkeypatch, other) -> None:  # type: ignore[no-untyped-def]
    """A group records a's and b's successes (d requires both) and pauses after the
    first release, while ``other(engine, d)`` runs in a thread of its own; neither may
    end in a deadlock, and the group records both."""
    engine, port = engine_with(make_engine(pg_url), clock, Scripted(None, None))
    a_run, b_run = d_waits_for_a_and_b_running(engine, port)
    d = job(engine, "p/d")
    first_done, go, errors = threading.Event(), threading.Event(), []
    real, calls = upstream.release_after, []

    def paused(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            first_done.set()
            go.wait(5)
        return out

    monkeypatch.setattr(upstream, "release_after", paused)
    reports = [Report(run["id"], 1, Outcome(S.SUCCEEDED)) for run in (a_run, b_run)]

    def run(act) -> None:  # type: ignore[no-untyped-def]
        try:
            act()
        except Exception as err:
            errors.append(err)

    tg = threading.Thread(target=run, args=(lambda: finish_together(engine.runs, reports),))
    tg.start()
    first_done.wait(5)
    to = threading.Thread(target=run, args=(lambda: other(engine, d),))
    to.start()
    # The other holds d and waits for a lock the group holds, or skips it and is through.
    wait_for_lock_wait(engine.db, "the other to wait", or_done=lambda: not to.is_alive())
    go.set()
    tg.join()
    to.join()
    assert errors == []
    assert [r.recorded for r in reports] == [True, True]


def test_group_second_update_fk_vs_recheck(pg_url: str, clock: Clock, monkeypatch):
    """The deadlock a benchmark met: a's release_after writes d's run (checks); b's writes
    it again (released), and the second UPDATE of a row this transaction wrote checks its
    foreign key, FOR KEY SHARE on d's jobs row. Meanwhile a recheck holds d and waits for
    d's run, which the group holds."""

    def recheck(engine, d) -> None:  # type: ignore[no-untyped-def]
        with engine.transaction() as conn:
            upstream.recheck(engine, conn, job_store.lock_job(conn, d.id), clock.now)

    group_meets(pg_url, clock, monkeypatch, recheck)


def test_group_second_update_fk_vs_batch(pg_url: str, clock: Clock, monkeypatch):
    """The same group; a tick batch holds d and checks d's upstreams (a share lock on a,
    which the group holds)."""

    def batch(engine, d) -> None:  # type: ignore[no-untyped-def]
        with engine.transaction() as conn:
            locked = job_store.lock_jobs(conn, [d.id])
            admit(engine, conn, locked[d.id], clock.now)

    group_meets(pg_url, clock, monkeypatch, batch)


def test_a_worker_s_tick_does_not_wait_for_an_upstream_s_success_under_way(
    pg_url: str, clock: Clock
):
    """d is triggered while a's success is being recorded (a's row held): d waits, and
    its trigger returns at once; a thread of the process looks again once a's
    transaction commits, and starts d (``scheduler.core.rechecks``)."""
    db = make_engine(pg_url)
    engine, port = engine_with(db, clock, Scripted(None))
    engine.rechecks = Rechecks(engine)  # as a worker's engine has
    apply(engine, spec("a"), spec("d", **needs("a")))
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a claimed, its worker died
    [a_run] = rows(engine, "a")
    a = HeldSuccess(engine, a_run["id"], clock)
    errors = a.errors
    assert a.locked.wait(5)
    triggered = threading.Thread(target=Scheduler(engine).trigger, args=("p/d",))
    triggered.start()
    triggered.join(5)
    assert not triggered.is_alive(), "the trigger waited for a's transaction"
    [r] = rows(engine, "d")
    assert (r["status"], r["reason"]) == ("WAITING", "upstream")
    a.finish()
    wait_until(lambda: rows(engine, "d")[0]["status"] == "RUNNING", 10, "d to be begun")
    assert errors == []
    db.dispose()
