"""The work path's delivery of an alert: to each of its channels, once.

A delivery first takes the alert for a lease (committed before any channel is called),
so that a second message for it (the watchdog's, a retry) finds it under way and does
nothing. Each channel that takes the alert is recorded at once and never sent it again;
the others are tried again after a backoff (a channel that just failed is not called
again by the same process for ``COOL_DOWN``: its alerts wait, uncounted, until then),
until ``CRONCHAIN_ALERT_ATTEMPTS`` deliveries have failed: the alert is then ``failed``
and ``cronchain health`` names the channel. A worker killed in the middle leaves the
alert pending; when its lease ends, the watchdog sends it again, and only the channels
not recorded are called (with the same idempotency key, so a receiver that had it can
tell).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronchain.scheduler import outside
from cronchain.scheduler.alerts import channels as channel_kinds
from cronchain.scheduler.alerts import raising
from cronchain.scheduler.alerts.channels import Alert, DeliveryError
from cronchain.scheduler.core.effects import Message, SendAlert
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.settings import AlertDelivery
from cronchain.scheduler.spec import channels as channel_specs
from cronchain.scheduler.storage import alert_store
from cronchain.scheduler.storage.alert_store import FAILED, PENDING, AlertRow

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Host

log = logging.getLogger("cronchain.alerts")
FIRST_BACKOFF = timedelta(seconds=10)
MAX_BACKOFF = timedelta(minutes=15)
# A channel that failed is not called again by this process for this long: a dead
# webhook that times out would otherwise hold a work-path thread per alert for its
# timeout (10,000 failing jobs, 100 threads, 10 s: the work path stalled 17 minutes).
COOL_DOWN = 30.0  # seconds
ERROR_LIMIT = 500  # characters of a channel's error kept
# (project, channel) -> when this process calls it again (monotonic), and why not now
_cooling: dict[tuple[str, str], tuple[float, str]] = {}
_cooling_lock = threading.Lock()


def backoff(attempts: int, jitter: float = 0.5) -> timedelta:
    """The wait after ``attempts`` failed deliveries: 10 s, doubling, at most 15 min,
    give or take 10% (``jitter`` 0-1: 0.5 is none), so that alerts that failed together
    (a burst a channel refused) do not come back together."""
    wait = min(FIRST_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF)
    return wait * (0.9 + 0.2 * jitter)


def deliver(engine: Host, alert_id: int, settings: AlertDelivery | None = None) -> str | None:
    """Deliver one alert; returns its state after, or None if it was not ours to
    deliver (sent already, given up, not due, under way elsewhere, or lost to another
    delivery when this one outlived its lease)."""
    settings = settings or AlertDelivery.from_env()
    # A mail takes a few exchanges, each bounded by the timeout (a name lookup is not).
    lease = timedelta(seconds=3 * settings.timeout + 5)
    with engine.transaction() as conn:
        row = alert_store.claim(conn, alert_id, engine.clock(), lease)
        if row is None:
            return None
        declared = alert_store.channels_of(conn, row.project)
    cooling: list[float] = []  # when the channels this delivery left alone are called again
    for name in row.channels:
        if name in row.delivered:
            continue
        with _cooling_lock:
            until, why = _cooling.get((row.project, name), (0.0, ""))
        if until > time.monotonic():  # not logged: the failure that started it was
            cooling.append(until)
            error = f"not called: it failed less than {COOL_DOWN:g} s ago ({why})"
        else:
            with engine.transaction() as conn:
                if not alert_store.renew(conn, row.id, row.attempts, engine.clock() + lease):
                    return None
            error = _send(name, declared, row, settings)
        with engine.transaction() as conn:
            if error is None:
                alert_store.delivered(conn, row.id, name, engine.clock())
            else:
                alert_store.failed_to(conn, row.id, row.attempts, name, error)
    left = [c for c in row.channels if c not in row.delivered]
    if cooling and len(cooling) == len(left):  # none called: not a try
        return _later(engine, row, max(cooling) - time.monotonic())
    return _settle(engine, row, settings)


def _send(
    name: str, declared: Mapping[str, Any], row: AlertRow, settings: AlertDelivery
) -> str | None:
    """Send to one channel; None when it took the alert, else why not (never quoting a
    secret: an error cronchain did not word is named by its type alone)."""
    key = (row.project, name)
    try:
        channel_kinds.deliver(_channel(name, declared), _alert(row), settings.timeout)
    except (DeliveryError, SpecError) as err:  # may quote a server's reply: text from outside
        error = outside.kept(str(err), ERROR_LIMIT) or ""
    except Exception as err:  # a library's error may quote the URL it was given
        error = f"{type(err).__name__} (its text is withheld: it may quote a secret)"
    else:
        with _cooling_lock:
            _cooling.pop(key, None)
        return None
    with _cooling_lock:
        _cooling[key] = (time.monotonic() + COOL_DOWN, error)
    log.warning(
        "alert %s (%s %s) to %s: %s", row.id, row.job, row.event, name, outside.one_line(error)
    )
    return error


def _later(engine: Host, row: AlertRow, seconds: float) -> str | None:
    """Every channel left is cooling down: the claim is given back, its attempt not
    counted, and the alert is due when they are called again."""
    due_at = engine.clock() + timedelta(seconds=max(seconds, 1.0))
    with engine.transaction() as conn:
        released = alert_store.release(conn, row.id, row.attempts, due_at)
    if released:
        engine.send([SendAlert(row.id, due_at)])
    return PENDING if released else None


def _settle(engine: Host, row: AlertRow, settings: AlertDelivery) -> str | None:
    give_up = row.attempts >= settings.attempts
    retry_at = engine.clock() + backoff(row.attempts, engine.rand())
    with engine.transaction() as conn:
        state = alert_store.settle(
            conn, row.id, row.attempts, give_up=give_up, retry_at=retry_at, now=engine.clock()
        )
    if state == FAILED:
        log.error(
            "alert %s (%s %s) given up after %s deliveries",
            row.id,
            row.job,
            row.event,
            row.attempts,
        )
    elif state == PENDING:
        engine.send([SendAlert(row.id, retry_at)])
    return state


def _channel(name: str, declared: Mapping[str, Any]) -> Mapping[str, Any]:
    """A channel by name: the project's job file first, then ``CRONCHAIN_CHANNELS``."""
    channel = declared.get(name) or channel_specs.from_env().get(name)
    if channel is None:
        raise DeliveryError(
            f"no channel named {name!r} (declare it under channels: or in CRONCHAIN_CHANNELS)"
        )
    return channel


def _alert(row: AlertRow) -> Alert:
    return Alert(
        row.id, row.job, row.event, row.slot, row.invocation_id, row.detail, row.created_at
    )


def resend_due(engine: Host, now: datetime, limit: int) -> list[SendAlert]:
    """The watchdog's: pending alerts due (for longer than a grace) and not under way,
    sent again: the message was lost, or a delivery's worker died and its lease ended."""
    with engine.transaction() as conn:
        due = alert_store.resend_due(conn, now, engine.grace, limit)
    return [SendAlert(alert_id) for alert_id in due]


class AlertsDue:
    """The watchdog's duty for alerts: raise those of runs late to start or running too
    long, and send again the pending ones whose message was lost."""

    def sweep(
        self, host: Host, now: datetime, limit: int, backlog: timedelta
    ) -> tuple[dict[str, int], list[Message]]:
        with host.transaction() as conn:  # its own: it locks no job nor run
            messages: list[Message] = [*raising.overdue(conn, now, limit)]
        messages += resend_due(host, now, limit)
        return {}, messages
