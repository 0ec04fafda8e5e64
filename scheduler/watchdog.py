"""The watchdog: keeps the promises written in ``jobs.watchdog_at`` and
``invocations.deadline`` when the message that should have kept them was lost
(Redis flushed, a worker killed, a crash between commit and send).

It re-emits the lost step with a new nonce, so the old message, should it still arrive,
is stale; the unique (job, slot) key means a repair can never fire a slot twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler import store
from scheduler.engine import RUNNING, STARTING, Engine, Message, SendStart
from statemachine import InvocationStatus, Repair

BATCH = 500


@dataclass(frozen=True)
class WatchdogReport:
    """What one pass repaired: ticks re-sent, starts re-sent, leases expired."""

    ticks: int = 0
    starts: int = 0
    expired: int = 0

    @property
    def repairs(self) -> int:
        return self.ticks + self.starts + self.expired


def run_once(engine: Engine, limit: int = BATCH) -> WatchdogReport:
    """One pass over what has lapsed, at most ``limit`` jobs and ``limit`` invocations."""
    messages: list[Message] = []
    with engine.transaction() as conn:
        now = engine.clock()
        jobs = store.claim_lapsed_jobs(conn, now, limit)
        for job in jobs:
            messages += engine.feed(conn, job, Repair(), now).messages
    starts = expired = 0
    with engine.transaction() as conn:
        now = engine.clock()
        for inv in store.claim_lapsed_invocations(conn, now, limit):
            if inv.status == STARTING:
                store.update_invocation(conn, inv.id, deadline=now + engine.grace)
                messages.append(SendStart(inv.id))
                starts += 1
            elif inv.status == RUNNING:
                failed = InvocationStatus.FAILED.value
                messages += engine.record_outcome(conn, inv, failed, "lease expired", now).messages
                expired += 1
    engine.send(messages)
    return WatchdogReport(ticks=len(jobs), starts=starts, expired=expired)
