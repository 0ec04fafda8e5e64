"""The work path's delivery of an alert: to each of its channels, once.

A delivery first takes the alert for a lease (committed before any channel is called),
so that a second message for it (the watchdog's, a retry) finds it under way and does
nothing. Each channel that takes the alert is recorded at once and never sent it again;
the others are tried again after a backoff, until ``CRONCHAIN_ALERT_ATTEMPTS`` deliveries
have failed: the alert is then ``failed`` and ``cronchain health`` names the channel. A
worker killed in the middle leaves the alert pending; when its lease ends, the watchdog
sends it again, and only the channels not recorded are called (with the same
idempotency key, so a receiver that had it can tell).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from scheduler.alerts import channels as channel_kinds
from scheduler.alerts.channels import Alert, DeliveryError
from scheduler.effects import SendAlert
from scheduler.errors import SpecError
from scheduler.settings import AlertDelivery
from scheduler.storage import alert_store
from scheduler.storage.alert_store import FAILED, PENDING, SENT, AlertRow

if TYPE_CHECKING:
    from scheduler.engine import Engine

log = logging.getLogger("cronchain.alerts")
FIRST_BACKOFF = timedelta(seconds=10)
MAX_BACKOFF = timedelta(minutes=15)


def backoff(attempts: int) -> timedelta:
    """The wait after ``attempts`` failed deliveries: 10 s, doubling, at most 15 min."""
    return min(FIRST_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF)


def deliver(engine: Engine, alert_id: int, settings: AlertDelivery | None = None) -> str | None:
    """Deliver one alert; returns its state after, or None if it was not ours to
    deliver (sent already, given up, not due, under way elsewhere)."""
    settings = settings or AlertDelivery.from_env()
    with engine.transaction() as conn:
        now = engine.clock()
        # A mail takes a few exchanges, each bounded by the timeout.
        row = alert_store.claim(conn, alert_id, now, timedelta(seconds=2 * settings.timeout))
        if row is None:
            return None
        declared = alert_store.channels_of(conn, row.project)
    errors = dict(row.errors)
    for name in row.channels:
        if name in row.delivered:
            continue
        try:
            channel_kinds.deliver(_channel(name, declared), _alert(row), settings.timeout)
        except (DeliveryError, SpecError) as err:
            errors[name] = str(err)
            log.warning("alert %s (%s %s) to %s: %s", row.id, row.job, row.event, name, err)
            continue
        errors.pop(name, None)
        with engine.transaction() as conn:
            alert_store.delivered(conn, row.id, name, engine.clock())
    return _settle(engine, row, errors, settings)


def _settle(engine: Engine, row: AlertRow, errors: dict[str, str], settings: AlertDelivery) -> str:
    now = engine.clock()
    if not errors:
        state, due_at = SENT, None
    elif row.attempts >= settings.attempts:
        state, due_at = FAILED, None
        log.error(
            "alert %s (%s %s) given up after %s deliveries: %s",
            row.id,
            row.job,
            row.event,
            row.attempts,
            errors,
        )
    else:
        state, due_at = PENDING, now + backoff(row.attempts)
    with engine.transaction() as conn:
        alert_store.settle(conn, row.id, state=state, errors=errors, due_at=due_at, now=now)
    if due_at is not None:
        engine.send([SendAlert(row.id, due_at)])
    return state


def _channel(name: str, declared: Mapping[str, Any]) -> Mapping[str, Any]:
    """A channel by name: the project's job file first, then ``CRONCHAIN_CHANNELS``."""
    channel = declared.get(name) or channel_kinds.from_env().get(name)
    if channel is None:
        raise DeliveryError(
            f"no channel named {name!r} (declare it under channels: or in CRONCHAIN_CHANNELS)"
        )
    return channel


def _alert(row: AlertRow) -> Alert:
    return Alert(
        row.id, row.job, row.event, row.slot, row.invocation_id, row.detail, row.created_at
    )


def resend_due(engine: Engine, now: datetime, limit: int) -> list[SendAlert]:
    """The watchdog's: pending alerts due (for longer than a grace) and not under way,
    sent again: the message was lost, or a delivery's worker died and its lease ended."""
    with engine.transaction() as conn:
        due = alert_store.resend_due(conn, now, engine.grace, limit)
    return [SendAlert(alert_id) for alert_id in due]
