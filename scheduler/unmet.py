"""``on_unmet``: what becomes of a slot that may wait for its upstreams or its gates no
longer (``scheduler.upstream``, ``scheduler.gates``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from cronchain.scheduler import debuglog
from cronchain.scheduler.alerts import raising
from cronchain.scheduler.controls import controls_of
from cronchain.scheduler.effects import Message
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import InvocationStatus as S


def settle(
    conn: Connection,
    job: JobRow,
    inv: InvocationRow,
    reason: str,
    error: str,
    now: datetime,
) -> tuple[bool, dict[str, Any], list[Message]]:
    """Whether the run starts all the same (``on_unmet: run``), the columns to write
    (its log; or its end, SKIPPED or FAILED with ``reason`` and ``error``) and the
    alerts its end raises."""
    if controls_of(job).on_unmet == "run":
        return (
            True,
            {"log": debuglog.append(inv.log, now, f"starts anyway (on_unmet: run): {error}")},
            [],
        )
    status = S.FAILED if controls_of(job).on_unmet == "fail" else S.SKIPPED
    if status == S.FAILED:
        alerts = raising.on_end(conn, job, inv, Outcome(status, error, reason), True, now)
    else:
        alerts = raising.on_skipped(conn, job, inv.id, inv.slot, reason, now)
    ended = dict(
        status=status.value,
        reason=reason,
        error=error,
        finished_at=now,
        deadline=None,
        log=debuglog.append(inv.log, now, f"{status.value}: {error}"),
    )
    return False, ended, alerts
