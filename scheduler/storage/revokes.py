"""Named queries of the ``revokes`` table: celery tasks to stop, kept until the revoke
is sent or the task has ended (see :data:`scheduler.storage.models.revokes`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from cronchain.scheduler.storage.models import revokes

_RECORD = {
    name: dialect.insert(revokes).on_conflict_do_nothing()
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def record(conn: Connection, task_id: str, invocation_id: int, due_at: datetime) -> None:
    conn.execute(
        _RECORD[conn.dialect.name],
        {"task_id": task_id, "invocation_id": invocation_id, "due_at": due_at},
    )


def forget(conn: Connection, task_ids: list[str]) -> None:
    if task_ids:
        conn.execute(delete(revokes).where(revokes.c.task_id.in_(task_ids)))


def claim_due(conn: Connection, now: datetime, limit: int, again_at: datetime) -> list[str]:
    """Revokes due (not sent since ``now``), each moved to ``again_at`` in case this
    send fails too."""
    query = (
        select(revokes.c.task_id)
        .where(revokes.c.due_at < now)
        .order_by(revokes.c.due_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    due = list(conn.execute(query).scalars())
    if due:
        conn.execute(update(revokes).where(revokes.c.task_id.in_(due)).values(due_at=again_at))
    return due
