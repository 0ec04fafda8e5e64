"""The schema, as SQLAlchemy Core tables. Migrations create it; a test compares the two.

The database guards what must never happen: one invocation per (job, slot) and per
(job, trigger id), states that exist, timestamps that go with their states.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.types import TypeDecorator

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on PostgreSQL and SQLite alike.

    Naive datetimes are rejected: a time without a zone is a bug waiting for DST."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect):  # type: ignore[no-untyped-def]
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} cannot be stored")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect):  # type: ignore[no-untyped-def]
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JOB_STATES = ("DISABLED", "SCHEDULED", "SUSPENDED", "QUEUED", "RUNNING", "OVERRUN")
INVOCATION_STATUSES = (
    "STARTING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "ABORTED",
    "SKIPPED",
    "WAITING",
)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("project", String(100), nullable=False),
    Column("name", String(100), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("schedule", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("revision", String(32), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("pause_reason", Text),
    Column("state", String(16), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("tick_at", UTCDateTime),
    Column("tick_nonce", BigInteger),
    Column("watchdog_at", UTCDateTime),
    Column("invocation_id", BigInteger),
    Column("invocation_running", Boolean, nullable=False),
    Column("overruns", Integer, nullable=False),
    Column("active", Integer, nullable=False),  # invocations STARTING or RUNNING
    Column("buffered", Integer, nullable=False),  # invocations WAITING
    Column("missed_from", UTCDateTime),  # paused: the first slot not fired
    # When the newest success finished: kept by a trigger on invocations (migration 0007)
    # for /metrics, which must not read the history to find it.
    Column("last_success_at", UTCDateTime),
    # The slot (a triggered run: when it was made) of its latest success, for the jobs
    # that require it (``scheduler.workflows.upstream``); kept by 0013's trigger.
    Column("last_success_filed", UTCDateTime),
    # For /metrics, kept by the same trigger (migration 0014): when the newest failure
    # ended, how many runs ended FAILED, and how many runs that started have ended and
    # their seconds from claim to end in all (a summary).
    Column("last_failure_at", UTCDateTime),
    Column("failures", BigInteger, nullable=False, server_default=text("0")),
    Column("runs_timed", BigInteger, nullable=False, server_default=text("0")),
    Column("run_seconds", Float, nullable=False, server_default=text("0")),
    # A failure alert awaits its ``recovered`` (scheduler.alerts.raising): a success
    # reads it from the row it locked, not from the alerts.
    Column("alert_failing", Boolean, nullable=False, server_default=false()),
    # Some job ``requires`` this one: its successes may release their waiting runs
    # (``scheduler.workflows.upstream``). Never false while a row of ``requirements`` names it.
    Column("downstream", Boolean, nullable=False, server_default=false()),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("project", "name"),
    CheckConstraint(_one_of("state", JOB_STATES), name="state"),
    CheckConstraint("(tick_at IS NULL) = (tick_nonce IS NULL)", name="tick"),
    CheckConstraint(
        "state NOT IN ('DISABLED', 'SUSPENDED') OR tick_nonce IS NULL", name="idle_no_tick"
    ),
    CheckConstraint("tick_nonce IS NOT NULL OR watchdog_at IS NULL", name="watchdog_tick"),
    CheckConstraint("state <> 'DISABLED' OR NOT enabled", name="disabled"),
    CheckConstraint("state <> 'SUSPENDED' OR paused", name="suspended"),
    CheckConstraint("active >= 0 AND buffered >= 0", name="counts"),
    sqlite_autoincrement=True,  # an id is never handed out again (see invocations)
)
Index("ix_jobs_watchdog_at", jobs.c.watchdog_at)
Index("ix_jobs_tick_at", jobs.c.tick_at)  # overdue ticks (scheduler.storage.observed)
# The jobs with alerts, whose runs the watchdog checks for late starts and long runs:
# without it, each pass read every active run (22 ms at 10,000) to find none.
# The queries say it as the index does (``spec`` is only ever ``jobs.spec``), so that
# each database sees the index answers them.
ALERTED = {
    "postgresql": "(spec ->> 'alerts') IS NOT NULL",
    "sqlite": "json_extract(spec, '$.alerts') IS NOT NULL",
}
# The jobs that require others (``requires``), said as ``ALERTED`` says its own.
REQUIRING = {
    "postgresql": "(spec -> 'requires') IS NOT NULL",
    "sqlite": "json_extract(spec, '$.requires') IS NOT NULL",
}
Index(
    "ix_jobs_alerted",
    jobs.c.id,
    postgresql_where=text(ALERTED["postgresql"]),
    sqlite_where=text(ALERTED["sqlite"]),
)


POOLED = "pool IS NOT NULL AND status IN ('WAITING', 'STARTING', 'RUNNING')"


def _filed_at(context: Any) -> datetime:
    """``filed_at`` of an insert that does not give it (``run_store.invocation_values``
    does): the slot, or the creation time of a triggered run."""
    row = context.get_current_parameters()
    return row.get("slot") or row["created_at"]


invocations = Table(
    "invocations",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("slot", UTCDateTime),
    Column("trigger_id", String(64)),
    Column("revision", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text),
    Column("attempt", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("deadline", UTCDateTime),
    Column("error", Text),
    Column("start_at", UTCDateTime),  # STARTING: when the next attempt is due (backoff)
    Column("timeout_at", UTCDateTime),  # RUNNING: when the attempt times out
    Column("worker", String(200)),  # who claimed the current attempt
    Column("attempts", JSON),  # the earlier attempts of a retried invocation
    Column("log", Text),  # the debug log, bounded
    Column("backfill", Boolean, nullable=False),  # run by `backfill`, outside the machine
    # What was checked before the run could start: ``{"upstream": [...]}``, the last
    # check of each upstream (``scheduler.workflows.upstream``).
    Column("checks", JSON),
    # The pool whose place the run takes while it is STARTING or RUNNING (``pool``).
    Column("pool", String(100)),
    # Where the run is filed in history: its slot, or a triggered run's creation time.
    # PostgreSQL partitions the table by its month (see scheduler/storage/partitions.py).
    Column("filed_at", UTCDateTime, nullable=False, default=lambda ctx: _filed_at(ctx)),
    UniqueConstraint("job_id", "slot"),
    UniqueConstraint("job_id", "trigger_id"),
    CheckConstraint(_one_of("status", INVOCATION_STATUSES), name="status"),
    CheckConstraint("slot IS NOT NULL OR trigger_id IS NOT NULL", name="key"),
    # A slot's run is filed under its slot: PostgreSQL's unique (job_id, slot, filed_at)
    # is then the unique (job_id, slot) it stands for.
    CheckConstraint("slot IS NULL OR filed_at = slot", name="filed"),
    CheckConstraint(
        "(status IN ('WAITING', 'STARTING', 'RUNNING')) = (finished_at IS NULL)", name="finished"
    ),
    CheckConstraint(
        "status NOT IN ('RUNNING', 'SUCCEEDED') OR started_at IS NOT NULL", name="started"
    ),
    CheckConstraint("status <> 'SKIPPED' OR reason IS NOT NULL", name="skipped_reason"),
    # Task ids, messages and late outcomes name an invocation by its id: SQLite would
    # hand a deleted last row's id out again, and a deleted job's run still in flight
    # would then be taken for the new row's (PostgreSQL's sequences never reuse).
    sqlite_autoincrement=True,
)
Index("ix_invocations_job_id_id", invocations.c.job_id, invocations.c.id)
Index(
    "ix_invocations_deadline",
    invocations.c.deadline,
    postgresql_where=invocations.c.deadline.isnot(None),
    sqlite_where=invocations.c.deadline.isnot(None),
)

# The runs of a pool that hold or wait for a place (scheduler.workflows.pools): a pool's start
# counts them under its lock.
Index(
    "ix_invocations_pool",
    invocations.c.pool,
    invocations.c.status,
    postgresql_where=text(POOLED),
    sqlite_where=text(POOLED),
)

# The WAITING runs alone, for the count of runs waiting by reason (/metrics).
Index(
    "ix_invocations_waiting",
    invocations.c.reason,
    invocations.c.backfill,
    postgresql_where=invocations.c.status == "WAITING",
    sqlite_where=invocations.c.status == "WAITING",
)

JOB_CHANGES = ("created", "updated", "enabled", "disabled", "paused", "resumed")

# Each change of a job's spec or flags, with the schedule in force after it: what
# ``explain`` reads to tell whether a past time was a slot, and whether the job was on.
job_changes = Table(
    "job_changes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("change", String(16), nullable=False),
    Column("revision", String(32), nullable=False),
    Column("schedule", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("days", String(8)),  # "both" (JobSpec.days), or NULL for cron's either
    Column("reason", Text),
    CheckConstraint(_one_of("change", JOB_CHANGES), name="change"),
    CheckConstraint("days IN ('both')", name="days"),
)
Index("ix_job_changes_job_id_at", job_changes.c.job_id, job_changes.c.at)

# A celery task that cronchain ended (abort, timeout, lapsed lease) is revoked after the
# commit that ended it. The row, written in that commit, is the promise: it is deleted
# once the revoke is sent or the task has ended, and the watchdog sends what is due.
revokes = Table(
    "revokes",
    metadata,
    Column("task_id", String(200), primary_key=True),
    Column(
        "invocation_id",
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("invocations.id", ondelete="CASCADE"),
    ),
    Column("due_at", UTCDateTime, nullable=False),
)
Index("ix_revokes_due_at", revokes.c.due_at)

# Each job's day of runs, written before retention drops the month that held them
# (scheduler/maintenance/retention.py): what ``explain`` and metrics answer for a pruned day.
# ``statuses`` counts runs by status, ``reasons`` by "STATUS/reason"; the lag (start
# minus slot, in seconds) is over the day's started runs of a slot, NULL if none.
invocation_days = Table(
    "invocation_days",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("runs", Integer, nullable=False),
    Column("statuses", JSON, nullable=False),
    Column("reasons", JSON, nullable=False),
    Column("lag_p50", Float),
    Column("lag_p95", Float),
    Column("lag_p99", Float),
)
Index("ix_invocation_days_day", invocation_days.c.day)

REPAIRS = ("ticks", "starts", "expired", "resent", "revokes")

# The watchdog's last pass and its repairs so far, by kind (``WatchdogReport``'s fields):
# one row, written after each pass, read by /metrics and /healthz.
watchdog = Table(
    "watchdog",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("passed_at", UTCDateTime, nullable=False),
    *(Column(kind, BigInteger, nullable=False) for kind in REPAIRS),
    CheckConstraint("id = 1", name="one_row"),
)

# Runs that ended, by status and reason, and the fire lag of slots as they are claimed:
# counted by triggers on ``invocations`` (migration 0008 says how and why), in rows of
# one PostgreSQL backend each (``shard``), summed by /metrics. ``reason`` is '' for none.
slot_outcomes = Table(
    "slot_outcomes",
    metadata,
    Column("status", String(16), primary_key=True),
    Column("reason", Text, primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("count", BigInteger, nullable=False),
)

# The histogram's upper bounds in seconds (``le``), as migration 0008's trigger writes
# them; a lag above the last is counted in "+Inf".
FIRE_LAG_BUCKETS = ("0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "300", "900")
fire_lags = Table(
    "fire_lags",
    metadata,
    Column("le", String(8), primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("count", BigInteger, nullable=False),
    Column("seconds", Float, nullable=False),
)

ALERT_STATES = ("pending", "sent", "failed")

# An alert: one row per (job, slot, event), the slot named by its run (one per job and
# slot), written in the transaction of the state change that raised it; the work path
# delivers it to each of ``channels`` and records each delivery in ``delivered``. While
# it is ``pending``, ``due_at`` is when a delivery is due: the next try's, or while one
# runs, the end of its lease. The watchdog sends again what is due and not under way,
# at ``resend_at`` at the earliest: each time after as long again as it has waited.
alerts = Table(
    "alerts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("invocation_id", BigInteger, nullable=False),
    Column("slot", UTCDateTime),
    Column("event", String(40), nullable=False),
    Column("detail", Text),
    Column("channels", JSON, nullable=False),
    Column("delivered", JSON, nullable=False),  # {channel: when it was delivered}
    Column("errors", JSON, nullable=False),  # {channel: its last delivery's error}
    Column("state", String(8), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("due_at", UTCDateTime),
    Column("resend_at", UTCDateTime),
    Column("sent_at", UTCDateTime),
    UniqueConstraint("job_id", "invocation_id", "event"),
    CheckConstraint(_one_of("state", ALERT_STATES), name="state"),
    sqlite_autoincrement=True,
)
Index("ix_alerts_job_id_id", alerts.c.job_id, alerts.c.id)
Index(
    "ix_alerts_due_at",
    alerts.c.due_at,
    postgresql_where=alerts.c.state == "pending",
    sqlite_where=alerts.c.state == "pending",
)

# What each job ``requires`` (``scheduler.workflows.upstream``): the upstream's project and name
# (a job of that name may not exist, or be made again with a new id). An upstream's
# success finds here the jobs whose waiting runs it may release. Written by apply.
requirements = Table(
    "requirements",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("project", String(100), primary_key=True),
    Column("name", String(100), primary_key=True),
)
Index("ix_requirements_upstream", requirements.c.project, requirements.c.name)

# Pools: named numbers of places that jobs share (``pool:``); a job file's ``pools:``
# or ``cronchain pool set`` writes them (scheduler.workflows.pools).
pools = Table(
    "pools",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("size", Integer, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    CheckConstraint("size >= 0", name="size"),
)

# The channels alerts are sent to, as a project's job file declares them (apply writes
# them). A secret is never here: a channel names the environment variable that holds it.
channels = Table(
    "channels",
    metadata,
    Column("project", String(100), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)
