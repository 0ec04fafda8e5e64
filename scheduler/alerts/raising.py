"""Alerts raised in the transaction of the state change that raises them.

Each is a row keyed by (job, slot, event): a repeated step, a second watchdog, a retry
of the same message all find the row and raise nothing. What a raise returns is a
message for the work path, sent once the transaction has committed; the watchdog sends
any pending alert whose message was lost.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from cronchain.scheduler.alerts.rules import RECOVERED, UPSTREAM_STALE, AlertRules, rules_of
from cronchain.scheduler.core.effects import SendAlert
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.storage import alert_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow

if TYPE_CHECKING:
    from cronchain.scheduler.core.effects import Message
    from cronchain.scheduler.core.host import Ended, Host


class Raised:
    """Hears a run's end, a failed attempt that retries and a claim: the alerts its job's
    rules ask for, raised in the transaction of the change."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool:
        return False

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]:
        if end.status == "SKIPPED":
            reason = end.outcome.reason or ""
            return [*on_skipped(conn, end.job, end.was.id, end.was.slot, reason, end.now)]
        return [*on_end(conn, end.job, end.was, end.outcome, end.final, end.now)]

    def claimed(
        self, conn: Connection, job: JobRow, inv: InvocationRow, now: datetime
    ) -> list[Message]:
        return [*on_claim(conn, job, inv, now)]


def raise_one(
    conn: Connection,
    job_id: int,
    rules: AlertRules,
    invocation_id: int,
    slot: datetime | None,
    event: str,
    detail: str | None,
    now: datetime,
) -> list[SendAlert]:
    alert_id = alert_store.insert(
        conn,
        job_id=job_id,
        invocation_id=invocation_id,
        slot=slot,
        event=event,
        detail=detail,
        to=list(rules.to),
        now=now,
    )
    return [] if alert_id is None else [SendAlert(alert_id)]


def on_end(
    conn: Connection, job: JobRow, inv: InvocationRow, outcome: Outcome, final: bool, now: datetime
) -> list[SendAlert]:
    """An attempt of ``inv`` ended with ``outcome``; ``final``: the slot ended with it."""
    rules = rules_of(job.spec)
    if rules is None:
        return []
    sent: list[SendAlert] = []
    status = outcome.status.value
    for event in rules.ended(status, final=final, reason=outcome.reason):
        if event == RECOVERED and not job.alert_failing:
            continue
        detail = outcome.error if event != RECOVERED else f"attempt {inv.attempt} succeeded"
        sent += raise_one(conn, job.id, rules, inv.id, inv.slot, event, detail, now)
    opened = status != "SUCCEEDED"  # a failure alert, else its recovered
    if sent and job.alert_failing != opened:
        alert_store.mark_failing(conn, job.id, opened)
    return sent


def on_skipped(
    conn: Connection,
    job: JobRow,
    invocation_id: int,
    slot: datetime | None,
    reason: str,
    now: datetime,
) -> list[SendAlert]:
    rules = rules_of(job.spec)
    if rules is None or not rules.ended("SKIPPED", final=True, reason=reason):
        return []
    detail = f"skipped ({reason})"
    return raise_one(conn, job.id, rules, invocation_id, slot, "skipped", detail, now)


def on_upstream_stale(
    conn: Connection, job: JobRow, inv: InvocationRow, unmet: str, now: datetime
) -> list[SendAlert]:
    """``inv`` waited ``max_wait`` for its upstreams, still not met (``unmet`` says how)."""
    rules = rules_of(job.spec)
    if rules is None or UPSTREAM_STALE not in rules.events:
        return []
    return raise_one(conn, job.id, rules, inv.id, inv.slot, UPSTREAM_STALE, unmet, now)


def on_claim(conn: Connection, job: JobRow, inv: InvocationRow, now: datetime) -> list[SendAlert]:
    """A worker claims ``inv``'s attempt: its slot's first attempt may be late."""
    rules = rules_of(job.spec)
    if rules is None or inv.attempt != 1 or inv.backfill:
        return []
    event = rules.late(inv.slot, now)
    if event is None:
        return []
    assert inv.slot is not None
    detail = f"claimed {(now - inv.slot).total_seconds():.0f} s after its slot"
    return raise_one(conn, job.id, rules, inv.id, inv.slot, event, detail, now)


def overdue(conn: Connection, now: datetime, limit: int) -> list[SendAlert]:
    """The watchdog's: runs of alerted jobs still unclaimed past ``late_start``, or
    running past ``running_longer``."""
    sent: list[SendAlert] = []
    for run in alert_store.active_runs(conn, limit):
        rules = rules_of(run["spec"])
        if rules is None:
            continue
        if run["worker"] is None:
            # Its first attempt, sent and not claimed, or not begun; not a retry's wait.
            first = (run["status"], run["attempt"]) in (("RUNNING", 1), ("STARTING", 0))
            event = rules.late(run["slot"], now) if first and not run["backfill"] else None
            detail = "no worker has claimed it yet"
        else:
            event = rules.long(run["started_at"], now)
            detail = f"attempt {run['attempt']} claimed at {run['started_at'].isoformat()}"
        if event is None:
            continue
        sent += raise_one(conn, run["job_id"], rules, run["id"], run["slot"], event, detail, now)
    return sent
