"""The admission chain: what a run about to start passes first (``host.Hold``).

The holds are the features' (upstreams, then gates, then a pool: the order the runtime
registers). A run passes them in that order and waits at the first that holds it; what
each hold it passed recorded (``checks``) is carried on, so that a run's row says
everything it was checked for. When a wait ends, the hold that held it hands the run on
(``resume``, after itself): the next hold may hold it in turn, or it starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from cronchain.scheduler.core.effects import Message, SendStart
from cronchain.scheduler.core.host import Admitting, Held, Hold
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import InvocationStatus

STARTING = InvocationStatus.STARTING.value


def admit(
    holds: Sequence[Hold], conn: Connection, run: Admitting, now: datetime, after: str | None = None
) -> Held | dict[str, Any]:
    """Pass ``run`` through the holds after the one named ``after`` (all of them if
    None): the first to hold it answers :class:`Held`, with what the others recorded
    in its columns; else the columns every hold wrote as it passed."""
    passed: dict[str, Any] = {}
    start = 0 if after is None else 1 + [h.name for h in holds].index(after)
    for hold in holds[start:]:
        said = hold.admit(conn, run, now)
        if isinstance(said, Held):
            return said
        if said:
            passed |= said
            run = Admitting(
                run.job, run.reference, passed.get("log", run.log), passed.get("checks")
            )
    return passed


def resume(
    holds: Sequence[Hold],
    conn: Connection,
    job: JobRow,
    inv: InvocationRow,
    columns: dict[str, Any],
    now: datetime,
    grace: timedelta,
    after: str | None,
) -> list[Message]:
    """Hand on a run whose row is locked and that may go on from the hold ``after``
    (None: from the start of the chain): it waits at the next hold that holds it, or
    starts within ``grace``. ``columns`` are what else to write of it (what was checked,
    its log). Returns what to send once the transaction commits."""
    text = columns.pop("log", inv.log)
    assert inv.filed_at is not None
    run = Admitting(job, inv.filed_at, text, columns.get("checks"))
    said = admit(holds, conn, run, now, after)
    if isinstance(said, Held):
        run_store.update_invocation(conn, inv, **(columns | said.columns))
        return said.then(inv.id)
    values = columns | {"log": text} | said | {"status": STARTING, "reason": None}
    run_store.update_invocation(conn, inv, **values, deadline=now + grace)
    return [SendStart(inv.id)]
