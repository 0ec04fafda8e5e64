"""django-celery-beat's tables as beat entries, read with SQL.

``import-beat --django-celery-beat URL`` must work where Django is not installed, or is
installed with settings of its own, so nothing here imports it: the tables are reflected
and read with SQLAlchemy, and each row is turned into what ``DatabaseScheduler`` would
build from it (``ModelEntry``): the crontab row as a Celery ``crontab`` read in the
row's zone, the interval as a ``timedelta``, ``args``/``kwargs``/``headers`` decoded by
kombu as beat decodes them, ``queue``, ``priority`` and ``expire_seconds`` as options.

What beat does with a row that a periodic job cannot do is named with the reason and
left out: a clocked (one fixed time) or solar schedule, a one-off task, a ``start_time``
still to come, an ``expires`` date still to come. A row beat itself will never send again
needs no job and is named apart, as ignored: an ``expires`` date past, a one-off task
that has run, a disabled one-off or clocked task (see :func:`ignored_because`). Columns
that older django-celery-beat versions lack read as empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery.schedules import ParseException, crontab
from kombu.utils.json import loads
from sqlalchemy import Connection, Engine, MetaData, Select, create_engine, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool

from cronchain.scheduler.declare.beatimport.entries import BeatEntry
from cronchain.scheduler.declare.beatimport.schedules import Unsupported
from cronchain.scheduler.errors import SpecError, TransientError
from cronchain.scheduler.storage.db import explained_failures, normalize_url

FIELD = "--django-celery-beat"
PAUSED = "disabled in django-celery-beat"
# A row without a queue is sent by beat as ``apply_async`` sends it: through the app's
# ``task_routes`` to its ``task_default_queue``. Neither is in the database; Celery's
# default queue is what an app that sets neither uses.
DEFAULT_QUEUE = "celery"

_TASKS = "django_celery_beat_periodictask"
# Each schedule table, in the order beat's ``PeriodicTask.scheduler`` picks the first set.
_SCHEDULES: dict[str, tuple[str, ...]] = {
    "interval": ("every", "period"),
    "crontab": ("minute", "hour", "day_of_week", "day_of_month", "month_of_year", "timezone"),
    "solar": ("event", "latitude", "longitude"),
    "clocked": ("clocked_time",),
}
_TASK_COLUMNS = (
    *("id", "name", "task", "enabled", "one_off", "start_time", "expires", "expire_seconds"),
    *("args", "kwargs", "queue", "exchange", "routing_key", "headers", "priority"),
    "total_run_count",
)
_PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")

Row = Mapping[str, Any]


def read_entries(
    database_url: str, *, now: datetime | None = None
) -> tuple[list[BeatEntry], list[tuple[str, str]], list[tuple[str, str]]]:
    """The periodic tasks of the django-celery-beat database at ``database_url``, as
    ``(entries, left_out, ignored)``: those beat entries can express; (name, reason) for
    those beat would still run that no job can; and (name, reason) for those beat will
    never send again (:func:`ignored_because`), which need no job. ``now`` decides whether
    a ``start_time`` is still to come and an ``expires`` date past (the clock, when not
    given: a command's boundary). A URL that names no such database is a
    :class:`SpecError`; a server that cannot be reached a :class:`TransientError`."""
    rows = _read_rows(database_url)
    now = now or datetime.now(UTC)
    entries: list[BeatEntry] = []
    left_out: list[tuple[str, str]] = []
    ignored: list[tuple[str, str]] = []
    for row in rows:
        why_not = ignored_because(row, now)
        if why_not is not None:
            ignored.append((row["name"], why_not))
            continue
        try:
            entries.append(entry_of(row, now))
        except Unsupported as why:
            left_out.append((row["name"], str(why)))
    return entries, left_out, ignored


def ignored_because(row: Row, now: datetime) -> str | None:
    """Why beat will never send the row's task again, or None. ``ModelEntry.is_due``
    disables a row whose ``expires`` has come (enabled or not: a disabled one would be
    disabled again at once), and a one-off task with a run counted, at its next check
    and without running it. Saving it disabled then clears ``last_run_at`` and beat
    resets the count, so a disabled one-off task (a clocked one is one-off too) reads
    the same whether it ran or was turned off first: it is ignored either way, as being
    done. A disabled interval, crontab or solar row is not: it is a schedule someone
    may enable again, so it is imported paused, or left out as what no job can do."""
    expires = _aware(row.get("expires"))
    if expires is not None and expires <= now:
        return f"expired {expires.isoformat()}: beat never sends it again"
    enabled = bool(row["enabled"])
    if not enabled and _kind(row) == "clocked":
        at = _aware(row.get("clocked.clocked_time"))
        if at is None:
            return "clocked, disabled: a one-time task beat does not run"
        when = "its one run time has passed" if at <= now else "turned off before its run"
        return f"clocked at {at.isoformat()}, disabled: {when}"
    if row.get("one_off") and not enabled:
        return "one_off, disabled: beat disables a one-off task after its run"
    if row.get("one_off") and row.get("total_run_count"):
        count = row["total_run_count"]
        return f"one_off, run {count} time(s): beat disables it at its next check, unrun"
    return None


def route_of(entry: BeatEntry) -> dict[str, Any]:
    """What beat sends a row's task with, for :func:`scheduler.declare.beatimport.entries.convert`:
    its ``queue`` (else :data:`DEFAULT_QUEUE`), and its ``priority`` and ``expires`` if
    set."""
    options = entry.options or {}
    sent: dict[str, Any] = {"queue": options.get("queue") or DEFAULT_QUEUE}
    sent |= {k: options[k] for k in ("priority", "expires") if options.get(k) is not None}
    return sent


def entry_of(row: Row, now: datetime) -> BeatEntry:
    """The beat entry for one task row (its columns, and each schedule's as
    ``kind.column``), or :class:`Unsupported`."""
    schedule, zone = _schedule(row)
    if row.get("one_off"):
        raise Unsupported("one_off: beat runs it once and then disables it")
    start = _aware(row.get("start_time"))
    if start is not None and start > now:
        raise Unsupported(
            f"start_time {start.isoformat()}: beat starts it then, cronchain when it is applied"
        )
    expires = _aware(row.get("expires"))
    if expires is not None:
        raise Unsupported(
            f"expires {expires.isoformat()}: beat stops running it then, a cronchain job has"
            " no end date"
        )
    return BeatEntry(
        name=row["name"],
        task=row["task"],
        schedule=schedule,
        zone=zone,
        args=_json_column(row, "args", list),
        kwargs=_json_column(row, "kwargs", dict),
        options=_options(row),
        paused=None if row["enabled"] else PAUSED,
    )


def _schedule(row: Row) -> tuple[Any, str]:
    """What beat evaluates for the row, and the zone a crontab is read in."""
    kind = _kind(row)
    if kind is None:
        raise Unsupported("no schedule: none of interval, crontab, solar and clocked is set")
    if row.get(f"{kind}.id") is None:
        raise Unsupported(f"its {kind} schedule (id {row[f'{kind}_id']}) does not exist")
    if kind == "clocked":
        at = _aware(row["clocked.clocked_time"])
        raise Unsupported(
            f"clocked schedule: one run at {at.isoformat() if at else at}, not a period"
        )
    if kind == "solar":
        where = f"{float(row['solar.latitude']):g}, {float(row['solar.longitude']):g}"
        raise Unsupported(
            f"solar schedule ({row['solar.event']} at {where}) has no cron equivalent"
        )
    if kind == "interval":
        return _interval(row["interval.every"], row["interval.period"]), "UTC"
    return _crontab(row), row.get("crontab.timezone") or "UTC"


def _kind(row: Row) -> str | None:
    """The row's kind of schedule: the first set, as beat picks it."""
    return next((k for k in _SCHEDULES if row.get(f"{k}_id") is not None), None)


def _interval(every: int, period: str) -> timedelta:
    if period not in _PERIODS:
        raise Unsupported(f"interval period {period!r} is not one of {', '.join(_PERIODS)}")
    try:
        return timedelta(**{period: every})
    except OverflowError:
        raise Unsupported(f"interval of {every} {period} is too long") from None


def _crontab(row: Row) -> crontab:
    """The row's fields read by Celery itself, as ``CrontabSchedule.schedule`` reads them."""
    fields = {f: row[f"crontab.{f}"] for f in _SCHEDULES["crontab"] if f != "timezone"}
    try:
        return crontab(**fields)
    except (ParseException, ValueError, TypeError) as err:
        text = " ".join(str(fields[f]) for f in ("minute", "hour", "day_of_month"))
        text += f" {fields['month_of_year']} {fields['day_of_week']}"
        raise Unsupported(f"crontab {text!r} is not one Celery reads: {err}") from None


def _json_column(row: Row, column: str, kind: type) -> Any:
    """A JSON text column decoded as beat decodes it (kombu's own types included, which
    the converter then names as not JSON)."""
    text = row.get(column)
    try:
        value = loads(text) if text else kind()
    except ValueError:
        raise Unsupported(f"{column} {text!r} is not JSON") from None
    if not isinstance(value, kind):
        raise Unsupported(f"{column} {text!r} is not a JSON {kind.__name__}")
    return value


def _options(row: Row) -> dict[str, Any]:
    """The options beat sends the task with. Those cronchain has no equivalent for
    (``exchange``, ``routing_key``, ``headers``) are kept, for the converter to name."""
    options: dict[str, Any] = {}
    for column in ("queue", "exchange", "routing_key"):
        if row.get(column):  # Django's save() stores "" as NULL; beat skips both
            options[column] = row[column]
    if row.get("priority") is not None:
        options["priority"] = row["priority"]
    if row.get("expire_seconds"):  # beat ignores 0: ``expires or expire_seconds``
        options["expires"] = row["expire_seconds"]
    headers = _json_column(row, "headers", dict)
    if headers:
        options["headers"] = headers
    return options


def _aware(value: datetime | None) -> datetime | None:
    """A datetime column in UTC: naive ones are UTC, as Django stores them with
    ``USE_TZ``; aware ones come in the session's zone."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --- reading the tables ------------------------------------------------------------------


def _read_rows(database_url: str) -> list[Row]:
    engine = _engine(database_url)
    try:
        with explained_failures(engine), engine.connect() as conn:
            query = _tasks_query(_reflect(conn, engine))
            return [dict(row) for row in conn.execute(query).mappings()]
    except TransientError as err:
        raise TransientError(f"{FIELD}: {err}") from err.__cause__
    finally:
        engine.dispose()


def _engine(database_url: str) -> Engine:
    """An engine that opens one connection and keeps none; a SQLite file must exist
    (sqlite3 would make an empty one)."""
    try:
        url = make_url(normalize_url(database_url))
        engine = create_engine(url, poolclass=NullPool)
    except (ArgumentError, ImportError, ValueError) as err:
        raise SpecError(
            FIELD,
            "must be a database URL (postgresql://user:pass@host/db, sqlite:///path/db.sqlite3):"
            f" {str(err).splitlines()[0] if str(err) else type(err).__name__}",
        ) from None
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        raise SpecError(FIELD, f"{url.database or '(none)'!r} is not a SQLite database file")
    return engine


def _reflect(conn: Connection, engine: Engine) -> MetaData:
    """The tables of django-celery-beat this database has: at least the tasks'."""
    present = set(inspect(conn).get_table_names())
    wanted = [_TASKS, *(_table(kind) for kind in _SCHEDULES)]
    if _TASKS not in present:
        where = engine.url.render_as_string(hide_password=True)
        raise SpecError(
            FIELD, f"database {where} has no table {_TASKS}: is it django-celery-beat's?"
        )
    metadata = MetaData()
    metadata.reflect(conn, only=[name for name in wanted if name in present])
    return metadata


def _table(kind: str) -> str:
    return f"django_celery_beat_{kind}schedule"


def _tasks_query(metadata: MetaData) -> Select[Any]:
    """Every task row with its schedule's columns (``kind.column``), in id order."""
    tasks = metadata.tables[_TASKS]
    columns: list[Any] = [tasks.c[name] for name in _TASK_COLUMNS if name in tasks.c]
    joined: Any = tasks
    for kind, fields in _SCHEDULES.items():
        table = metadata.tables.get(_table(kind))
        if table is None or f"{kind}_id" not in tasks.c:
            continue  # an older version without this kind of schedule
        joined = joined.outerjoin(table, tasks.c[f"{kind}_id"] == table.c.id)
        columns.append(tasks.c[f"{kind}_id"])
        columns += [table.c[f].label(f"{kind}.{f}") for f in ("id", *fields) if f in table.c]
    return select(*columns).select_from(joined).order_by(tasks.c.id)
