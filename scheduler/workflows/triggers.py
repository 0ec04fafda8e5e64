"""``triggers``: a success of one job triggers others (``triggers: [b, other/c]``).

Each target is triggered in the transaction that records the success, once the job's
own machine has heard it (``host.Ended.after``). The trigger's id names the run, so a
repeated step cannot trigger twice. Cycles are refused when a file is applied
(``scheduler.workflows.triggergraph``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from cronchain.scheduler.core.effects import Message
from cronchain.scheduler.errors import NotFound
from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import InvocationStatus, Trigger

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Ended, Host

log = logging.getLogger("cronchain.engine")
SUCCEEDED = InvocationStatus.SUCCEEDED.value


class TriggersOnSuccess:
    """Hears a success of a job that triggers others. It changes other jobs' rows, so
    a group of outcomes records such a success alone (``reads``)."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool:
        return status == SUCCEEDED and bool(job.controls.triggers)

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]:
        targets = end.job.controls.triggers
        if end.status != SUCCEEDED or not end.final or end.was.backfill or not targets:
            return []

        def trigger_all() -> list[Message]:
            return [
                message
                for target in targets
                for message in trigger(host, conn, end.job, target, end.was.id, end.now)
            ]

        end.after(trigger_all)
        return []


def trigger(
    host: Host, conn: Connection, source: JobRow, target: str, invocation_id: int, now: datetime
) -> list[Message]:
    """Trigger ``target`` for the success ``invocation_id`` of ``source``."""
    ref = target if "/" in target else f"{source.project}/{target}"
    try:
        job = job_store.lock_job_named(conn, ref)
    except NotFound:
        log.warning("%s: cannot trigger %s: no such job", source.ref, ref)
        return []
    return host.feed(conn, job, Trigger(f"after:{invocation_id}", strict=False), now).messages
