"""The work path: a worker that makes runs' calls (``noop``, ``http``), many at once.

The control path (ticks, starts, the watchdog) only records an attempt and sends
``cronchain.run`` to the work queue (``cronchain.run_batch`` for attempts begun together,
as the ticks of jobs due at the same instant are); it never waits for an endpoint. A
work-path worker (``celery -A cronchain.tasks worker --queues cronchain.work --pool threads``)
takes the message, claims the attempts (from then on their leases and timeouts count),
makes each call while its lease is renewed, and records each outcome. A redelivered or
repeated message finds its attempts claimed, or no longer current, and does nothing.
Each attempt is named with its job, and is claimed and recorded only on a run of it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from cronchain.scheduler import outside
from cronchain.scheduler.core.attempts import AttemptRef
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Call, Invoker, Outcome
from cronchain.scheduler.workers import events

log = logging.getLogger("cronchain.work")


def execute(
    engine: Engine, invocation_id: int, attempt: int, worker: str, job_id: int | None = None
) -> Outcome | None:
    """Claim the attempt, make its call and record its outcome; None if the attempt
    could not be claimed (not current, claimed by another delivery, or not ``job_id``'s)."""
    call = engine.attempts.claim(invocation_id, attempt, worker, job_id=job_id)
    if call is None:
        log.info(
            "invocation %s attempt %s (job %s): not current, claimed already or gone",
            invocation_id,
            attempt,
            job_id,
        )
        return None
    events.started(call)
    return _run(engine, call)


def execute_batch(
    engine: Engine, attempts: list[AttemptRef], worker: str, threads: int
) -> list[Outcome]:
    """Claim attempts sent together in one transaction, make their calls side by side
    (one slow endpoint must not hold up the others) and record each outcome as it
    comes; returns once all are recorded, so that the worker's thread stays taken
    until then: ``--concurrency`` bounds the batches a worker runs at once, and a warm
    shutdown waits for them."""
    calls = engine.attempts.claim_many(attempts, worker)
    for call in calls:
        events.started(call)
    if len(calls) < len(attempts):
        log.info(
            "%s of %s attempts not current or claimed already",
            len(attempts) - len(calls),
            len(attempts),
        )
    if len(calls) <= 1:
        return [_run(engine, call) for call in calls]
    pool = _calls_pool(threads)
    futures = [pool.submit(_run, engine, call) for call in calls[1:]]
    outcomes = [_run(engine, calls[0])]  # this thread makes one call itself
    wait(futures)
    return outcomes + [f.result() for f in futures]


def _run(engine: Engine, call: Call) -> Outcome:
    lease = Lease(call.invocation_id, call.attempt, call.lease, lost=call.lost, job_id=call.job_id)
    engine.leases.hold(lease)  # until the outcome is recorded: the watchdog leaves it alone
    started = time.monotonic()
    try:
        outcome = make_call(engine.invokers.get(call.kind), call)
    except BaseException:  # the worker is stopping (make_call keeps every Exception):
        # the attempt is the watchdog's once its lease lapses
        engine.leases.release(lease)
        raise
    recorded = engine.runs.report(lease, outcome)
    events.ended(call, outcome, recorded, time.monotonic() - started)
    return outcome


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _calls_pool(threads: int) -> ThreadPoolExecutor:
    """The threads that make the calls of batches, one pool per process."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(threads, thread_name_prefix="cronchain-call")
        return _pool


def make_call(invoker: Invoker | None, call: Call) -> Outcome:
    if invoker is None:  # a celery run's message on the work queue: a bug, recorded
        return Outcome.failed(f"the work path does not run the {call.kind} kind")
    try:
        return invoker.invoke(call)
    except Exception as err:  # an invoker bug must not leave the run RUNNING
        log.exception("invoker %s failed for invocation %s", call.kind, call.invocation_id)
        return Outcome.failed(f"{call.kind}: {outside.described(err)}")
