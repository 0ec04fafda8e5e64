"""The rows of alerts and channels (``scheduler.alerts`` says what they mean)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from cronchain.scheduler.storage.models import ALERTED, alerts, channels, invocations, jobs
from cronchain.scheduler.timing.iso import iso

PENDING, SENT, FAILED = "pending", "sent", "failed"
_INSERT = {
    name: dialect.insert(alerts).on_conflict_do_nothing().returning(alerts.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


@dataclass(frozen=True)
class AlertRow:
    id: int
    job_id: int
    project: str
    job: str
    invocation_id: int
    slot: datetime | None
    event: str
    detail: str | None
    channels: list[str]
    delivered: dict[str, str]
    errors: dict[str, str]
    state: str
    attempts: int
    created_at: datetime
    due_at: datetime | None
    sent_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        """What ``cronchain alerts --json`` prints of it."""
        return {
            "id": self.id,
            "job": self.job,
            "slot": iso(self.slot),
            "invocation": self.invocation_id,
            "event": self.event,
            "state": self.state,
            "channels": list(self.channels),
            "delivered": {name: at for name, at in self.delivered.items()},
            "errors": dict(self.errors),
            "attempts": self.attempts,
            "raised_at": iso(self.created_at),
            "sent_at": iso(self.sent_at),
            "detail": self.detail,
        }


def delivery_text(channels: list[str], delivered: Mapping[str, str], state: str = PENDING) -> str:
    """``ops-slack sent, oncall-mail not yet``: where an alert went, for people. A channel
    an alert ``state`` FAILED never reached is ``not sent``: it was given up."""
    missing = "not sent" if state == FAILED else "not yet"
    return ", ".join(f"{c} {'sent' if c in delivered else missing}" for c in channels)


def insert(
    conn: Connection,
    *,
    job_id: int,
    invocation_id: int,
    slot: datetime | None,
    event: str,
    detail: str | None,
    to: list[str],
    now: datetime,
) -> int | None:
    """Raise an alert; None if (job, slot, event) has one already."""
    statement = _INSERT[conn.dialect.name].values(
        job_id=job_id,
        invocation_id=invocation_id,
        slot=slot,
        event=event,
        detail=detail,
        channels=to,
        delivered={},
        errors={},
        state=PENDING,
        attempts=0,
        created_at=now,
        due_at=now,
    )
    return conn.execute(statement).scalar()


def mark_failing(conn: Connection, job_id: int, failing: bool) -> None:
    """A failure alert was raised (True) or its ``recovered`` (False)."""
    conn.execute(update(jobs).where(jobs.c.id == job_id).values(alert_failing=failing))


_COLUMNS = (alerts, jobs.c.project, jobs.c.name.label("job_name"))


def _row(m: Mapping[str, Any]) -> AlertRow:
    fields = {k: m[k] for k in AlertRow.__dataclass_fields__ if k in m and k != "job"}
    return AlertRow(**fields, job=f"{m['project']}/{m['job_name']}")


def claim(conn: Connection, alert_id: int, now: datetime, lease: timedelta) -> AlertRow | None:
    """Take a pending alert that is due, for one delivery: until ``now + lease`` (which
    the delivery renews before each channel) no other delivery of it starts. Its
    ``attempts`` after the claim fences what this delivery writes. None if it is not
    pending, not due, or under way elsewhere."""
    row = (
        conn.execute(
            select(*_COLUMNS)
            .select_from(alerts.join(jobs, jobs.c.id == alerts.c.job_id))
            .where(alerts.c.id == alert_id)
            .with_for_update(of=alerts)
        )
        .mappings()
        .first()
    )
    if row is None or row["state"] != PENDING or (row["due_at"] and row["due_at"] > now):
        return None
    attempts = row["attempts"] + 1
    conn.execute(
        update(alerts)
        .where(alerts.c.id == alert_id)
        .values(attempts=attempts, due_at=now + lease, resend_at=None)
    )
    return _row({**row, "attempts": attempts})


def _ours(conn: Connection, alert_id: int, attempt: int) -> Mapping[str, Any] | None:
    """The alert, locked, if delivery ``attempt`` still holds it (pending, and no later
    delivery has claimed it since its lease ended)."""
    row = (
        conn.execute(select(alerts).where(alerts.c.id == alert_id).with_for_update())
        .mappings()
        .first()
    )
    if row is None or row["state"] != PENDING or row["attempts"] != attempt:
        return None
    return row


def renew(conn: Connection, alert_id: int, attempt: int, until: datetime) -> bool:
    """Extend delivery ``attempt``'s lease; False if it has lost the alert."""
    if _ours(conn, alert_id, attempt) is None:
        return False
    conn.execute(update(alerts).where(alerts.c.id == alert_id).values(due_at=until))
    return True


def release(conn: Connection, alert_id: int, attempt: int, due_at: datetime) -> bool:
    """Give back delivery ``attempt``'s claim uncounted (it called no channel): the
    alert is due again at ``due_at``. False if the delivery no longer holds it."""
    if _ours(conn, alert_id, attempt) is None:
        return False
    conn.execute(
        update(alerts).where(alerts.c.id == alert_id).values(attempts=attempt - 1, due_at=due_at)
    )
    return True


def delivered(conn: Connection, alert_id: int, channel: str, at: datetime) -> None:
    """One channel had it: never sent there again. Recorded whichever delivery sent
    it, even one that lost its lease: a delivery that happened is a fact."""
    row = (
        conn.execute(
            select(alerts.c.delivered, alerts.c.errors)
            .where(alerts.c.id == alert_id)
            .with_for_update()
        )
        .mappings()
        .first()
    )
    if row is None:
        return
    errors = {k: v for k, v in row["errors"].items() if k != channel}
    done = {**row["delivered"], channel: at.isoformat()}
    conn.execute(
        update(alerts).where(alerts.c.id == alert_id).values(delivered=done, errors=errors)
    )


def failed_to(conn: Connection, alert_id: int, attempt: int, channel: str, error: str) -> None:
    """Delivery ``attempt`` could not send to ``channel``: its last error, if it still
    holds the alert."""
    row = _ours(conn, alert_id, attempt)
    if row is not None:
        errors = {**row["errors"], channel: error}
        conn.execute(update(alerts).where(alerts.c.id == alert_id).values(errors=errors))


def settle(
    conn: Connection,
    alert_id: int,
    attempt: int,
    *,
    give_up: bool,
    retry_at: datetime,
    now: datetime,
) -> str | None:
    """End delivery ``attempt``: ``sent`` when every channel has had the alert, else
    ``failed`` (``give_up``) or ``pending`` until ``retry_at``. None if it no longer
    holds the alert (a later delivery decides)."""
    row = _ours(conn, alert_id, attempt)
    if row is None:
        return None
    left = [c for c in row["channels"] if c not in row["delivered"]]
    state = SENT if not left else FAILED if give_up else PENDING
    conn.execute(
        update(alerts)
        .where(alerts.c.id == alert_id)
        .values(
            state=state,
            due_at=retry_at if state == PENDING else None,
            sent_at=now if state == SENT else None,
        )
    )
    return state


def resend_due(conn: Connection, now: datetime, late: timedelta, limit: int) -> list[int]:
    """Pending alerts due for longer than ``late`` and not under way, whose message
    was lost or waits in a queue: the watchdog sends them again, each time after as
    long again as it has waited, so that a work path down for an hour is not sent a
    copy per pass."""
    rows = conn.execute(
        select(alerts.c.id, alerts.c.due_at)
        .where(
            alerts.c.state == PENDING,
            alerts.c.due_at <= now - late,
            (alerts.c.resend_at.is_(None)) | (alerts.c.resend_at <= now),
        )
        .order_by(alerts.c.due_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for alert_id, due_at in rows:
        again = now + max(late, now - due_at)
        conn.execute(update(alerts).where(alerts.c.id == alert_id).values(resend_at=again))
    return [alert_id for alert_id, _ in rows]


def listing(conn: Connection, job_id: int | None = None, limit: int = 50) -> list[AlertRow]:
    """The newest alerts, of one job or of all."""
    query = select(*_COLUMNS).select_from(alerts.join(jobs, jobs.c.id == alerts.c.job_id))
    if job_id is not None:
        query = query.where(alerts.c.job_id == job_id)
    query = query.order_by(alerts.c.id.desc()).limit(limit)
    return [_row(m) for m in conn.execute(query).mappings()]


def of_invocation(conn: Connection, job_id: int, invocation_id: int) -> list[AlertRow]:
    query = (
        select(*_COLUMNS)
        .select_from(alerts.join(jobs, jobs.c.id == alerts.c.job_id))
        .where(alerts.c.job_id == job_id, alerts.c.invocation_id == invocation_id)
        .order_by(alerts.c.id)
    )
    return [_row(m) for m in conn.execute(query).mappings()]


def failing_channels(conn: Connection, since: datetime, tries: int) -> dict[str, str]:
    """Channels that keep failing: an alert to it given up since ``since``, or still
    pending after ``tries`` deliveries, and none delivered to it since; with each one's
    last error."""
    rows = conn.execute(
        select(alerts.c.errors, alerts.c.delivered, alerts.c.created_at).where(
            alerts.c.created_at >= since,
            (alerts.c.state == FAILED)
            | (alerts.c.state == PENDING) & (alerts.c.attempts >= tries)
            | (alerts.c.state == SENT),
        )
    )
    failing: dict[str, tuple[datetime, str]] = {}
    took: dict[str, datetime] = {}
    for errors, done, created_at in rows:
        for channel, at in (done or {}).items():
            took[channel] = max(took.get(channel, created_at), datetime.fromisoformat(at))
        for channel, error in (errors or {}).items():
            if channel not in (done or {}) and created_at >= failing.get(channel, (since, ""))[0]:
                failing[channel] = (created_at, error)
    return {c: error for c, (at, error) in failing.items() if took.get(c, at) <= at}


def active_runs(conn: Connection, limit: int) -> list[Mapping[str, Any]]:
    """The active runs (STARTING, RUNNING) of jobs that have alerts, oldest first: the
    watchdog's candidates for ``late_start`` and ``running_longer``. A run that has its
    ``running_longer`` alert is done with, and so is an unclaimed one with its
    ``late_start``, so that the ``limit`` moves on to the others."""
    alerted = text(ALERTED[conn.dialect.name])
    if not _any_alerted(conn, alerted):
        return []  # no job has alerts: not a run to read
    raised = alerts.alias("raised")

    def has(event: str) -> Any:
        return (
            select(raised.c.id)
            .where(
                raised.c.job_id == invocations.c.job_id,
                raised.c.invocation_id == invocations.c.id,
                raised.c.event.like(f"{event}>%"),
            )
            .exists()
        )

    query = (
        select(
            invocations.c.id,
            invocations.c.job_id,
            invocations.c.slot,
            invocations.c.status,
            invocations.c.attempt,
            invocations.c.worker,
            invocations.c.started_at,
            invocations.c.backfill,
            jobs.c.spec,
        )
        .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
        .where(
            invocations.c.deadline.isnot(None),
            alerted,
            ~has("running_longer"),
            invocations.c.worker.isnot(None) | ~has("late_start"),
        )
        .order_by(invocations.c.id)
        .limit(limit)
    )
    return list(conn.execute(query).mappings())


def _any_alerted(conn: Connection, alerted: Any) -> bool:
    """Whether a job has alerts, from ``ix_jobs_alerted`` alone. PostgreSQL has no
    statistics of the expression and guesses that nearly every job matches: asked for
    any one, it would read the table until the first (57 ms at 100,000 jobs, none with
    alerts). Asked for the least id, it takes the small index, which is in that order."""
    query = select(jobs.c.id).where(alerted).order_by(jobs.c.id).limit(1)
    return conn.execute(query).first() is not None


def channels_of(conn: Connection, project: str) -> dict[str, dict[str, Any]]:
    query = select(channels.c.name, channels.c.spec).where(channels.c.project == project)
    return {name: spec for name, spec in conn.execute(query)}


def replace_channels(
    conn: Connection, project: str, declared: dict[str, dict[str, Any]], now: datetime
) -> None:
    """Make ``project``'s channels the ``declared`` ones."""
    conn.execute(delete(channels).where(channels.c.project == project))
    if declared:
        conn.execute(
            channels.insert(),
            [
                {"project": project, "name": name, "spec": spec, "updated_at": now}
                for name, spec in sorted(declared.items())
            ],
        )
