"""The health checks that ``GET /healthz`` and ``cronchain health`` share.

Each check names itself and says ``ok`` with a one-line ``detail``; the whole is healthy
when every check is. They run at once, on threads, each bounded by a short timeout, so
that an answer comes within about two seconds whatever is down: a health check that
hangs is read as one that failed, later.

- ``database``: it answers a query.
- ``broker``: a connection to it opens.
- ``watchdog``: its last pass is less than two intervals old (beat sends it; a control
  worker runs it), so lost steps are being repaired.
- ``ticks``: no pending tick is further past its grace than ``CRONCHAIN_HEALTH_OVERDUE``
  (default two watchdog intervals).
- ``control_path``, ``work_path``: a worker consumes the control queue, and one the work
  queue (``noop`` and ``http`` runs wait in it otherwise), by Celery's ``inspect``.

``cronchain health`` asks each of them. ``GET /healthz`` cannot afford to: ``inspect``
waits a second for the workers' replies, which is Kubernetes' whole probe timeout. So
``cronchain serve`` asks the broker and the workers from a thread of its own every
``REFRESH`` seconds (:class:`WorkerWatch`), and a request reads their last answer, which
says how old it is, beside the database's checks made then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from kombu.utils.url import maybe_sanitize_url
from sqlalchemy import Engine, text

from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage import alert_store, observed
from cronchain.scheduler.storage.clock import database_clock
from cronchain.scheduler.storage.db import first_line
from cronchain.scheduler.web import CHECKS

log = logging.getLogger("cronchain.web")
# Each probe's own patience: the broker's connection, and how long inspect collects replies.
BROKER_TIMEOUT = 1.0
INSPECT_TIMEOUT = 1.0
# What the whole may take before an unfinished check is reported as not answering.
DEADLINE = 2.5


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Health:
    """The checks in a fixed order; ``ok`` when each is."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def as_json(self) -> dict[str, Any]:
        """``{"ok": ..., "failed": [names], "checks": {name: {"ok": ..., "detail": ...}}}``"""
        return {
            "ok": self.ok,
            "failed": self.failed,
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in self.checks},
        }


def check_health(
    db: Engine,
    app: Celery,
    settings: Settings,
    now: Callable[[], datetime] | None = None,
    watch: WorkerWatch | None = None,
) -> Health:
    """Every check, run at once (see the module's docstring); with ``watch``, the broker
    and the workers as it last found them."""
    clock = now or database_clock(db)
    probes: dict[str, Callable[[], list[Check]]] = {
        "database": lambda: _database_checks(db, settings, clock)
    }
    if watch is None:
        probes |= _broker_and_workers(app, settings)
    else:
        probes["watched"] = watch.checks
    pool = ThreadPoolExecutor(len(probes), thread_name_prefix="health")
    futures = {pool.submit(probe): name for name, probe in probes.items()}
    wait(futures, timeout=DEADLINE)
    pool.shutdown(wait=False, cancel_futures=True)  # a hung probe is not waited for
    found: dict[str, Check] = {}
    for future, name in futures.items():
        if future.done():
            found |= {c.name: c for c in future.result()}
        else:
            for check in _NAMES[name]:
                found[check] = Check(check, False, f"no answer within {DEADLINE:g} s")
    return Health(tuple(found[name] for name in CHECKS))


_NAMES = {
    "database": ("database", "watchdog", "ticks", "alerts"),
    "broker": ("broker",),
    "workers": ("control_path", "work_path"),
    "watched": ("broker", "control_path", "work_path"),
}
REFRESH = 10.0  # seconds between a WorkerWatch's looks


def _broker_and_workers(app: Celery, settings: Settings) -> dict[str, Callable[[], list[Check]]]:
    return {
        "broker": lambda: [_broker_check(app, settings)],
        "workers": lambda: _worker_checks(app, settings),
    }


class WorkerWatch:
    """The broker's and the workers' checks, made by a thread every ``every`` seconds, for
    a probe that cannot wait for them (``GET /healthz``). What it found says how long
    ago; an answer older than three periods is a failure (the thread is stuck), and
    before its first look each check fails as not made yet."""

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        every: float = REFRESH,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.app, self.settings, self.every, self.clock = app, settings, every, clock
        self._found: list[Check] | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def start(self) -> WorkerWatch:
        threading.Thread(target=self._run, name="cronchain-health", daemon=True).start()
        return self

    def look(self) -> None:
        """One look at the broker and the workers, now (the thread's, and tests')."""
        found = [
            c for probe in _broker_and_workers(self.app, self.settings).values() for c in probe()
        ]
        with self._lock:
            self._found, self._at = found, self.clock()

    def checks(self) -> list[Check]:
        with self._lock:
            found, at = self._found, self._at
        names = _NAMES["watched"]
        if found is None:
            return [
                Check(name, False, "not checked yet: cronchain serve has just started")
                for name in names
            ]
        age = self.clock() - at
        if age > 3 * self.every:
            return [Check(name, False, f"not checked for {age:.0f} s") for name in names]
        return [Check(c.name, c.ok, f"{c.detail} ({age:.0f} s ago)") for c in found]

    def _run(self) -> None:
        while True:
            try:
                self.look()
            except Exception:  # its checks say what failed; this is a bug, logged
                log.exception("the health checks of the broker and workers failed")
            time.sleep(self.every)


def _database_checks(db: Engine, settings: Settings, clock: Callable[[], datetime]) -> list[Check]:
    """The database, then what it says of the watchdog and the ticks (one connection)."""
    started = time.monotonic()
    try:
        with db.connect() as conn:
            conn.execute(text("SELECT 1"))
            answered = Check("database", True, f"answered in {_ms(started)}")
            now = clock()
            passes = observed.watchdog_passes(conn)
            overdue = observed.overdue_ticks(conn, now - settings.watchdog_grace)
            failing = alert_store.failing_channels(conn, now - ALERTS_SINCE, ALERT_TRIES)
    except Exception as err:
        return [
            Check("database", False, first_line(err)),
            *(Check(name, False, "unknown: the database did not answer") for name in _AFTER),
        ]
    return [
        answered,
        _watchdog_check(passes, settings, now),
        _ticks_check(overdue, settings, now),
        _alerts_check(failing),
    ]


_AFTER = ("watchdog", "ticks", "alerts")
# A channel is failing when an alert to it was given up within a day, or has failed
# this many deliveries and is still being retried.
ALERTS_SINCE = timedelta(days=1)
ALERT_TRIES = 3


def _alerts_check(failing: dict[str, str]) -> Check:
    if not failing:
        return Check("alerts", True, "every channel takes its alerts")
    named = "; ".join(f"{name}: {error}" for name, error in sorted(failing.items()))
    return Check("alerts", False, f"channel(s) failing: {named}")


def _watchdog_check(passes: observed.WatchdogPasses, settings: Settings, now: datetime) -> Check:
    limit = timedelta(seconds=2 * settings.watchdog_interval)
    if passes.passed_at is None:
        return Check("watchdog", False, "it never passed: is beat running, and a control worker?")
    age = now - passes.passed_at
    if age > limit:
        return Check(
            "watchdog",
            False,
            f"last pass {_seconds(age)} ago, more than two intervals ({_seconds(limit)}):"
            " is beat running, and a control worker?",
        )
    return Check("watchdog", True, f"last pass {_seconds(age)} ago")


def _ticks_check(overdue: observed.Overdue, settings: Settings, now: datetime) -> Check:
    if overdue.oldest is None:
        return Check("ticks", True, "no tick overdue")
    late = now - overdue.oldest - settings.watchdog_grace
    what = f"{overdue.count} overdue, the oldest {_seconds(late)} past its grace"
    limit = settings.health_overdue
    if late > limit:
        return Check("ticks", False, f"{what} (more than {_seconds(limit)})")
    return Check("ticks", True, f"{what} (at most {_seconds(limit)} is healthy)")


def _broker_check(app: Celery, settings: Settings) -> Check:
    started = time.monotonic()
    where = maybe_sanitize_url(settings.broker_url)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0.2, timeout=BROKER_TIMEOUT
            )
            conn.default_channel  # noqa: B018 (opens it: the Redis transport pings here)
    except Exception as err:
        return Check("broker", False, f"{where}: {first_line(err)}")
    return Check("broker", True, f"{where} answered in {_ms(started)}")


def _worker_checks(app: Celery, settings: Settings) -> list[Check]:
    """One broadcast: which workers consume which queues."""
    try:
        replies = app.control.inspect(timeout=INSPECT_TIMEOUT).active_queues() or {}
    except Exception as err:
        reason = f"workers could not be asked: {first_line(err)}"
        return [Check("control_path", False, reason), Check("work_path", False, reason)]
    consumers: dict[str, list[str]] = {}
    for worker, queues in replies.items():
        for queue in queues or []:
            consumers.setdefault(queue.get("name", ""), []).append(worker)
    return [
        _consumed("control_path", settings.queue, consumers, "ticks and repairs wait"),
        _consumed("work_path", settings.work_queue, consumers, "noop and http runs wait"),
    ]


def _consumed(name: str, queue: str, consumers: dict[str, list[str]], otherwise: str) -> Check:
    workers = sorted(consumers.get(queue, []))
    if not workers:
        return Check(name, False, f"no worker consumes queue {queue}: {otherwise}")
    return Check(name, True, f"{len(workers)} worker(s) on queue {queue}: {', '.join(workers)}")


def _ms(started: float) -> str:
    return f"{(time.monotonic() - started) * 1000:.0f} ms"


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.0f} s"
