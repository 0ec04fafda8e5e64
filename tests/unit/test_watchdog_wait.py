"""How long a watchdog run waited, from the expiry beat gave it (``expires`` is
``WATCHDOG_LIFETIME`` after it was sent, celeryconfig)."""

from datetime import UTC, datetime, timedelta

from cronchain.scheduler.maintenance.watchdog import waited

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def test_a_run_that_waited_knows_how_long():
    sent = NOW - timedelta(seconds=7)
    expires = (sent + timedelta(seconds=10)).isoformat()  # as Celery's message carries it
    assert waited(expires, 10, NOW) == timedelta(seconds=7)
    assert waited(sent + timedelta(seconds=10), 10, NOW) == timedelta(seconds=7)


def test_a_naive_expiry_is_utc():
    expires = (NOW + timedelta(seconds=4)).replace(tzinfo=None).isoformat()
    assert waited(expires, 10, NOW) == timedelta(seconds=6)


def test_a_run_sent_by_hand_or_early_waited_nothing():
    assert waited(None, 10, NOW) == timedelta(0)
    assert waited(NOW + timedelta(seconds=12), 10, NOW) == timedelta(0)  # clocks apart
