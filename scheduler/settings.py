"""Settings from the environment: every ``CRONCHAIN_*`` variable but the alert channels'
(``CRONCHAIN_CHANNELS`` and ``CRONCHAIN_SMTP_URL``, which ``spec/channels.py`` reads).

With nothing set, cronchain runs embedded: SQLite (WAL) and Celery's filesystem
transport under ``CRONCHAIN_HOME`` (default ``./.cronchain``), so that ``cronchain up``
works with nothing installed but the package.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from cronchain.scheduler.errors import ConfigError, SpecError

# Far below the Redis visibility timeout (celeryconfig sets 1 h), so that an ETA message is
# never redelivered while it waits; ticks further away are parked (core.stepping), gate
# checks further away hop.
ETA_HORIZON = timedelta(minutes=5)
# How long a watchdog run may wait in the queue before Celery drops it unrun (its beat
# entry's ``expires``). A run that waited longer than an interval repairs nothing: the
# next one, sent since, will (``watchdog.pass_for``). It still sends parked ticks, which
# nothing else sends; an hour bounds the runs that pile up while no control worker runs.
WATCHDOG_LIFETIME = 3600.0
VISIBILITY_TIMEOUT = timedelta(hours=1)
# Ticks due at the same instant share a message and a transaction, this many at most
# (the runs they begin share the work path's messages too): each message and transaction
# costs a few ms whatever its size, so the larger, the cheaper per fire; the last tick of
# a batch waits for the ones before it (a tick takes 0.10-0.14 ms of a batch's wall time
# in bench.hot_path: 30-45 ms for 300). bench.fire_rate: a herd of 2,000, worker CPU per
# fire 1.10-1.16 ms at 20, 0.70-0.83 ms at 100; a herd of 100,000 drained in 17.5-18.1 s
# at 100, 14.4-16.0 s at 300; at 300, 3,600 and 4,800 fires/s held from a cold start
# (docs/how-to/herds.md, "Set the batch size").
TICK_BATCH = 300
# A tick goes out at the next multiple of this at or after its slot, so that ticks due a
# few milliseconds apart share a message (and Celery's per-task cost) as well: a fire may
# start this much later than its slot, never earlier. It divides a second, so that
# cron's whole-second slots go out on time. bench.fire_rate, 10k jobs at 200 fires/s
# spread over milliseconds, lag p50/p99: 10 ms 8/170, 20 ms 17/86, 25 ms 21/31, 40 ms
# 33/41 (the fewer messages, the less CPU and queueing; the wider, the later).
TICK_SLACK = timedelta(milliseconds=25)
# Runs of the noop and http kinds wait on endpoints: they run on the work path, a worker
# of its own with a pool of threads, so that no endpoint can make a tick late.
WORK_CONCURRENCY = 100
# How long history is kept (PostgreSQL drops whole months older than this, after a
# per-job daily rollup: scheduler/maintenance/retention.py).
RETENTION_DAYS = 180


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str
    home: Path
    watchdog_interval: float
    queue: str = "cronchain"
    work_queue: str = "cronchain.work"  # the work path: runs of the noop and http kinds
    work_concurrency: int = WORK_CONCURRENCY  # threads of the work path's worker
    imports: tuple[str, ...] = ()
    http_allow: str = ""  # addresses/networks the http kind may call besides public ones
    jobs_dir: Path | None = None  # job files that beat reconciles on an interval
    apps: tuple[str, ...] = ()  # Celery apps whose @periodic jobs beat reconciles too
    reconcile_interval: float = 60.0
    tick_batch: int = TICK_BATCH
    tick_slack: timedelta = TICK_SLACK
    retention: timedelta = timedelta(days=RETENTION_DAYS)
    # cronchain serve's credentials, USER:PASS (kept out of repr: it is a secret).
    web_basic_auth: str | None = field(default=None, repr=False)
    # How far past its grace a tick may be before the health check fails (None: two
    # watchdog intervals).
    overdue_limit: float | None = None
    # /metrics reports each job's series (off for a registry too large to scrape so).
    metrics_per_job: bool = True
    log_format: str = "text"  # or json: how cronchain's workers log (workers.logs)
    run_events: bool = True  # task events per run, for Flower (workers.events)

    @property
    def health_overdue(self) -> timedelta:
        """How late past its grace a pending tick may be before ``cronchain health``
        fails: two watchdog intervals unless ``CRONCHAIN_HEALTH_OVERDUE`` says. A lost
        tick is repaired within one interval of its grace, so past two something keeps
        the repairs from landing (no worker takes them, or they queue behind a backlog)."""
        seconds = self.overdue_limit or 2 * self.watchdog_interval
        return timedelta(seconds=seconds)

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith("filesystem://")

    @property
    def watchdog_grace(self) -> timedelta:
        """How late a promised step may be before the watchdog assumes it was lost.

        Half an interval: a lost step is then repaired by the watchdog run that follows
        its deadline, so within one and a half intervals of when it was due."""
        return timedelta(seconds=self.watchdog_interval / 2)

    @property
    def broker_folder(self) -> Path:
        return self.home / "broker"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and check every ``CRONCHAIN_*`` variable; an unset or empty one takes its
        default. A value cronchain cannot use raises ``ConfigError`` naming the variable
        and what it accepts, before anything connects anywhere."""
        env = os.environ if env is None else env
        home = Path(env.get("CRONCHAIN_HOME") or ".cronchain").resolve()
        jobs_dir = env.get("CRONCHAIN_JOBS_DIR")
        queue = _queue(env, "CRONCHAIN_QUEUE", "cronchain")
        work_queue = _queue(env, "CRONCHAIN_WORK_QUEUE", "cronchain.work")
        if work_queue == queue:
            raise ConfigError(
                "CRONCHAIN_WORK_QUEUE",
                f"must differ from CRONCHAIN_QUEUE ({queue!r}): the work path has a queue"
                " of its own",
            )
        return cls(
            database_url=_url(
                env,
                "CRONCHAIN_DATABASE_URL",
                f"sqlite:///{home}/cronchain.db",
                "a database URL (postgresql://user:pass@host/db, sqlite:///path/cronchain.db)",
            ),
            broker_url=_broker_url(env),
            home=home,
            watchdog_interval=_seconds(
                env, "CRONCHAIN_WATCHDOG_INTERVAL", 30, WATCHDOG_MOST, _PARKED_LATE
            ),
            queue=queue,
            work_queue=work_queue,
            work_concurrency=_whole(
                env, "CRONCHAIN_WORK_CONCURRENCY", WORK_CONCURRENCY, 1, 10_000, "threads"
            ),
            imports=_imports(env),
            http_allow=_http_allow(env),
            jobs_dir=Path(jobs_dir).resolve() if jobs_dir else None,
            apps=_apps(env),
            reconcile_interval=_seconds(env, "CRONCHAIN_RECONCILE_INTERVAL", 60),
            tick_batch=_whole(env, "CRONCHAIN_TICK_BATCH", TICK_BATCH, 1, 1000, "ticks"),
            tick_slack=_slack(env),
            retention=history_retention(env),
            web_basic_auth=_basic_auth(env),
            overdue_limit=_seconds(env, "CRONCHAIN_HEALTH_OVERDUE", 0) or None,
            metrics_per_job=_flag(env, "CRONCHAIN_METRICS_PER_JOB", True),
            log_format=_choice(env, "CRONCHAIN_LOG_FORMAT", ("text", "json")),
            run_events=_flag(env, "CRONCHAIN_RUN_EVENTS", True),
        )


def history_retention(env: Mapping[str, str] | None = None) -> timedelta:
    """``CRONCHAIN_RETENTION``, in whole days: read on its own by the watchdog's history
    pass, whose task gets the engine but not the settings."""
    env = os.environ if env is None else env
    days = _whole(env, "CRONCHAIN_RETENTION", RETENTION_DAYS, 1, 36_500, "days")
    return timedelta(days=days)


@dataclass(frozen=True)
class AlertDelivery:
    """``CRONCHAIN_ALERT_TIMEOUT`` (seconds one channel may take, default 10) and
    ``CRONCHAIN_ALERT_ATTEMPTS`` (deliveries before an alert is given up, default 8:
    about 20 minutes of backoff). Read on their own by the work path's alert task."""

    timeout: float = 10.0
    attempts: int = 8

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AlertDelivery:
        env = os.environ if env is None else env
        return cls(
            _seconds(env, "CRONCHAIN_ALERT_TIMEOUT", cls.timeout),
            _whole(env, "CRONCHAIN_ALERT_ATTEMPTS", cls.attempts, 1, 100, "deliveries"),
        )


# Intervals from a second to a day: a shorter one would keep a worker busy with the
# watchdog alone, a longer one leave a lost chain unrepaired for days.
_SECONDS = (1.0, 86_400.0)
# The watchdog sends each tick parked until its slot comes within the ETA horizon: a pass
# at least every 4 minutes sends it a minute or more before its slot.
WATCHDOG_MOST = (ETA_HORIZON - timedelta(minutes=1)).total_seconds()
_PARKED_LATE = (
    f"ticks more than {ETA_HORIZON.seconds // 60} minutes ahead are parked until the"
    " watchdog sends them, and a longer interval would make them late"
)


def _text(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


def _whole(env: Mapping[str, str], name: str, default: int, low: int, high: int, unit: str) -> int:
    text = _text(env, name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:  # not a number, or longer than Python converts
        value = low - 1
    if not low <= value <= high:
        raise ConfigError(
            name, f"must be a whole number of {unit} from {low} to {high}, not {text!r}"
        )
    return value


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    text = _text(env, name).lower()
    if not text:
        return default
    if text not in (*_TRUE, *_FALSE):
        raise ConfigError(name, f"must be true or false (or yes/no, on/off, 1/0), not {text!r}")
    return text in _TRUE


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, the first when unset."""
    text = _text(env, name).lower() or choices[0]
    if text not in choices:
        raise ConfigError(name, f"must be {' or '.join(choices)}, not {text!r}")
    return text


def _slack(env: Mapping[str, str]) -> timedelta:
    text = _text(env, "CRONCHAIN_TICK_SLACK_MS")
    if not text:
        return TICK_SLACK
    divisors = [ms for ms in range(1, 1001) if 1000 % ms == 0]
    try:
        ms = int(text)
    except ValueError:
        ms = -1
    if ms != 0 and ms not in divisors:
        raise ConfigError(
            "CRONCHAIN_TICK_SLACK_MS",
            f"must divide a second: 0 (exact), {', '.join(map(str, divisors[:-1]))} or"
            f" {divisors[-1]} milliseconds, not {text!r}",
        )
    return timedelta(milliseconds=ms)


def _seconds(
    env: Mapping[str, str], name: str, default: float, high: float = _SECONDS[1], why: str = ""
) -> float:
    text = _text(env, name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low = _SECONDS[0]
    if not low <= value <= high:  # NaN compares false: refused too, as is infinity
        reason = f": {why}" if why else ""
        raise ConfigError(
            name, f"must be a number of seconds from {low:g} to {high:g}, not {text!r}{reason}"
        )
    return value


def _queue(env: Mapping[str, str], name: str, default: str) -> str:
    text = _text(env, name)
    if not text:
        return default
    if len(text) > 200 or any(c.isspace() or c == "," for c in text):
        raise ConfigError(name, f"must be a queue name (no spaces or commas), not {text!r}")
    return text


def _url(env: Mapping[str, str], name: str, default: str, accepted: str) -> str:
    text = _text(env, name)
    if not text:
        return default
    if not _URL.match(text):
        raise ConfigError(name, f"must be {accepted}")  # not echoed: it may hold a password
    return text


def _broker_url(env: Mapping[str, str]) -> str:
    from kombu.transport import TRANSPORT_ALIASES

    accepted = "a broker URL (redis://host:6379/0, or filesystem:// for the embedded one)"
    url = _url(env, "CRONCHAIN_BROKER_URL", "filesystem://", accepted)
    scheme = url.partition("://")[0].partition("+")[0]
    if scheme not in TRANSPORT_ALIASES:
        raise ConfigError(
            "CRONCHAIN_BROKER_URL", f"must be {accepted}; kombu has no transport {scheme!r}"
        )
    return url


def _basic_auth(env: Mapping[str, str]) -> str | None:
    text = _text(env, "CRONCHAIN_WEB_BASIC_AUTH")
    if not text:
        return None
    user, colon, password = text.partition(":")
    if not (user and colon and password):  # not echoed: it holds a password
        raise ConfigError("CRONCHAIN_WEB_BASIC_AUTH", "must be USER:PASSWORD, both non-empty")
    return text


def _imports(env: Mapping[str, str]) -> tuple[str, ...]:
    modules = tuple(m.strip() for m in _text(env, "CRONCHAIN_IMPORTS").split(",") if m.strip())
    for module in modules:
        if not all(part.isidentifier() for part in module.split(".")):
            raise ConfigError(
                "CRONCHAIN_IMPORTS", f"must be comma-separated module names, not {module!r}"
            )
    return modules


# An app as ``celery -A`` names it: a module, and the app's attribute after a colon.
_APP_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")


def _apps(env: Mapping[str, str]) -> tuple[str, ...]:
    refs = [r.strip() for r in _text(env, "CRONCHAIN_APPS").split(",") if r.strip()]
    for ref in refs:
        if not _APP_REF.fullmatch(ref):
            raise ConfigError(
                "CRONCHAIN_APPS",
                f"must be comma-separated Celery apps as module:attribute (etl.celery:app),"
                f" not {ref!r}",
            )
    return tuple(dict.fromkeys(refs))  # an app named twice is applied once


def _http_allow(env: Mapping[str, str]) -> str:
    from cronchain.scheduler.invokers.netguard import parse_allow

    text = _text(env, "CRONCHAIN_HTTP_ALLOW")
    try:
        parse_allow(text)
    except SpecError as err:
        raise ConfigError(
            err.field, f"{err.reason}: give addresses or networks, comma-separated"
        ) from None
    return text


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
