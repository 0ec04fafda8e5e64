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

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime

from cronchain.scheduler import outside
from cronchain.scheduler.core.attempts import AttemptRef
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Call, Invoker, Outcome, aio
from cronchain.scheduler.workers import events

log = logging.getLogger("cronchain.work")


def execute(
    engine: Engine,
    invocation_id: int,
    attempt: int,
    worker: str,
    job_id: int | None = None,
    filed_at: datetime | None = None,
) -> Outcome | None:
    """Claim the attempt, make its call and record its outcome; None if the attempt
    could not be claimed (not current, claimed by another delivery, or not ``job_id``'s
    run filed at ``filed_at``)."""
    call = engine.attempts.claim(invocation_id, attempt, worker, job_id=job_id, filed_at=filed_at)
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
    shutdown waits for them. Calls of a kind that has a coroutine (``http``) are made
    on the process's event loop, however many; those that answer at once (a ``noop``
    that does not sleep) in this thread, as they are claimed, and recorded in the
    claim's transaction; the others on ``threads`` threads."""
    started = time.monotonic()
    calls, answered = engine.attempts.claim_many(
        attempts, worker, lambda call: _answer_at_once(engine, call)
    )
    took = time.monotonic() - started  # the claim's transaction, which made them
    for call in calls:
        events.started(call)
        if call.invocation_id in answered:
            events.ended(call, answered[call.invocation_id], True, took)
    if len(calls) < len(attempts):
        log.info(
            "%s of %s attempts not current or claimed already",
            len(attempts) - len(calls),
            len(attempts),
        )
    done = dict(answered)
    waiting = [call for call in calls if call.invocation_id not in answered]
    if len(waiting) <= 1:
        done |= {call.invocation_id: _run(engine, call) for call in waiting}
        return [done[call.invocation_id] for call in calls]
    pool = _calls_pool(threads)
    instant: list[Call] = []
    on_loop: list[Call] = []
    in_threads: list[Call] = []
    for call in waiting:
        if _instant(engine, call):
            instant.append(call)
        elif _coroutine_of(engine, call) is not None:
            on_loop.append(call)
        else:
            in_threads.append(call)
    futures = {call.invocation_id: aio.submit(_arun(engine, call, pool)) for call in on_loop}
    futures |= {call.invocation_id: pool.submit(_run, engine, call) for call in in_threads}
    if instant:
        done |= _run_together(engine, instant)
    wait(futures.values())
    done |= {invocation_id: future.result() for invocation_id, future in futures.items()}
    return [done[call.invocation_id] for call in calls]


def _run_together(engine: Engine, calls: list[Call]) -> dict[int, Outcome]:
    """Calls that answer at once (a ``noop`` that does not sleep) that their claim did
    not record (``Attempts.claim_many`` says which): made here one after the other and
    recorded together, no thread, no handing over, one group commit. By invocation."""
    leases = [_hold(engine, call) for call in calls]
    started = time.monotonic()
    try:
        outcomes = [make_call(engine.invokers.get(call.kind), call) for call in calls]
    except BaseException:  # the worker is stopping: the attempts are the watchdog's
        for lease in leases:
            engine.leases.release(lease)
        raise
    recorded = engine.runs.report_all(leases, outcomes)  # lets every lease go
    took = time.monotonic() - started
    for call, outcome, written in zip(calls, outcomes, recorded, strict=True):
        events.ended(call, outcome, written, took)
    return {call.invocation_id: outcome for call, outcome in zip(calls, outcomes, strict=True)}


def _answer_at_once(engine: Engine, call: Call) -> Outcome | None:
    """The outcome of a call that answers at once, made as its attempt is claimed: in
    the claim's transaction, which records it (``Attempts.claim_many``)."""
    return make_call(engine.invokers.get(call.kind), call) if _instant(engine, call) else None


def _instant(engine: Engine, call: Call) -> bool:
    answers_at_once = getattr(engine.invokers.get(call.kind), "instant", None)
    return answers_at_once is not None and answers_at_once(call)


def _run(engine: Engine, call: Call) -> Outcome:
    lease = _hold(engine, call)
    started = time.monotonic()
    try:
        outcome = make_call(engine.invokers.get(call.kind), call)
    except BaseException:  # the worker is stopping (make_call keeps every Exception):
        # the attempt is the watchdog's once its lease lapses
        engine.leases.release(lease)
        raise
    return _report(engine, call, lease, outcome, started)


async def _arun(engine: Engine, call: Call, pool: ThreadPoolExecutor) -> Outcome:
    """``_run`` on the event loop: the call awaited there, its outcome recorded on one of
    ``pool``'s threads (a write to the database must not stop the loop's other calls)."""
    lease = _hold(engine, call)
    started = time.monotonic()
    try:
        outcome = await _acall(_coroutine_of(engine, call), call)
    except BaseException:  # cancelled: the loop is stopping, as a worker's thread may
        engine.leases.release(lease)
        raise
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(pool, _report, engine, call, lease, outcome, started)


def _hold(engine: Engine, call: Call) -> Lease:
    lease = Lease(
        call.invocation_id,
        call.attempt,
        call.lease,
        lost=call.lost,
        job_id=call.job_id,
        filed_at=call.filed_at,
    )
    engine.leases.hold(lease)  # until the outcome is recorded: the watchdog leaves it alone
    return lease


def _report(engine: Engine, call: Call, lease: Lease, outcome: Outcome, started: float) -> Outcome:
    recorded = engine.runs.report(lease, outcome)
    events.ended(call, outcome, recorded, time.monotonic() - started)
    return outcome


def _coroutine_of(engine: Engine, call: Call) -> Callable[[Call], Awaitable[Outcome]] | None:
    return getattr(engine.invokers.get(call.kind), "ainvoke", None)


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
        return _invoker_failed(call, err)


async def _acall(ainvoke: Callable[[Call], Awaitable[Outcome]] | None, call: Call) -> Outcome:
    """``make_call`` of a coroutine."""
    assert ainvoke is not None
    try:
        return await ainvoke(call)
    except Exception as err:
        return _invoker_failed(call, err)


def _invoker_failed(call: Call, err: Exception) -> Outcome:
    log.exception("invoker %s failed for invocation %s", call.kind, call.invocation_id)
    return Outcome.failed(f"{call.kind}: {outside.described(err)}")
