"""The work path: a worker that makes runs' calls (``noop``, ``http``), many at once.

The control path (ticks, starts, the watchdog) only records an attempt and sends
``cronchain.run`` to the work queue; it never waits for an endpoint. A work-path worker
(``celery -A tasks worker --queues cronchain.work --pool threads``) takes the message,
claims the attempt (from then on its lease and timeout count), makes the call while
its lease is renewed, and records the outcome. A redelivered or repeated message finds
the attempt claimed, or no longer current, and does nothing.
"""

from __future__ import annotations

import logging

from scheduler.engine import Engine
from scheduler.invokers import Call, Invoker, Outcome
from scheduler.leases import Lease

log = logging.getLogger("cronchain.work")


def execute(engine: Engine, invocation_id: int, attempt: int, worker: str) -> Outcome | None:
    """Claim the attempt, make its call and record its outcome; None if the attempt
    could not be claimed (not current, or claimed by another delivery)."""
    call = engine.runs.claim(invocation_id, attempt, worker)
    if call is None:
        log.info("invocation %s attempt %s: not current or claimed already", invocation_id, attempt)
        return None
    lease = engine.leases.hold(Lease(invocation_id, attempt, call.lease, lost=call.lost))
    try:  # held until the outcome is recorded, so that the watchdog leaves the run alone
        outcome = _call(engine.invokers.get(call.kind), call)
        engine.runs.record_patiently(invocation_id, attempt, outcome, job_id=call.job_id)
    finally:
        engine.leases.release(lease)
    return outcome


def _call(invoker: Invoker | None, call: Call) -> Outcome:
    if invoker is None:  # a celery run's message on the work queue: a bug, recorded
        return Outcome.failed(f"the work path does not run the {call.kind} kind")
    try:
        return invoker.invoke(call)
    except Exception as err:  # an invoker bug must not leave the run RUNNING
        log.exception("invoker %s failed for invocation %s", call.kind, call.invocation_id)
        return Outcome.failed(f"{call.kind}: {type(err).__name__}: {err}")
