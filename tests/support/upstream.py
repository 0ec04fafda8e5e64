"""``requires`` for tests: upstreams within an hour, and the set-ups of the races around
a downstream's release."""

from __future__ import annotations

import threading

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.storage import job_store
from tests.support.deliver import deliver
from tests.support.engine import RecordingPort
from tests.support.jobs import apply, spec
from tests.support.locks import wait_for_lock_wait
from tests.support.rows import rows

WITHIN = {"succeeded_within": "1h"}


def needs(*names: str, **controls: object) -> dict[str, object]:
    """The controls of a job that requires each of ``names`` (within the hour), and
    ``controls``."""
    return {"requires": [{"job": n, **WITHIN} for n in names], **controls}


def tick_batch_holding(  # type: ignore[no-untyped-def]
    engine, first: int, then: int, through: threading.Event | None = None
) -> tuple[threading.Thread, list]:
    """A thread whose transaction locks job ``first`` and then job ``then``, as a tick
    batch locks its jobs in id order; returned holding ``first``, with the list of what it
    raised (a deadlock ends one of two transactions). It takes ``then`` once the test's
    transaction waits on a lock or, for a transaction that goes through without waiting,
    once the test sets ``through``."""
    holding, errors = threading.Event(), []
    done = through.is_set if through else None

    def batch() -> None:
        try:
            with engine.transaction() as conn:
                job_store.lock_jobs(conn, [first])
                holding.set()
                wait_for_lock_wait(engine.db, "the test's transaction to wait", or_done=done)
                job_store.lock_jobs(conn, [then])
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=batch)
    thread.start()
    assert holding.wait(5)
    return thread, errors


def d_waits_for_a_and_b_running(engine, port: RecordingPort) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """d waits for a and b, whose runs are claimed and never report (the engine's
    invoker hangs twice): their outcomes are the test's to record. Returns their rows."""
    apply(engine, spec("a"), spec("b"), spec("d", **needs("a", "b")))
    sched = Scheduler(engine)
    sched.trigger("p/d")
    sched.trigger("p/a")
    sched.trigger("p/b")
    deliver(engine, port)
    return rows(engine, "a")[0], rows(engine, "b")[0]
