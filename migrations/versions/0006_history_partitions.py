"""history by month: invocations.filed_at, partitioned on PostgreSQL; invocation_days

Every invocation gets ``filed_at`` (its slot, or a triggered run's creation time) and
``invocation_days`` is added, on both databases. On PostgreSQL, ``invocations`` becomes
a table partitioned by month of ``filed_at`` (why, and what keeps each slot and trigger
id to one row: :mod:`scheduler.storage.partitions`). The rows move in one transaction:
the old table is renamed and stripped of its index names, the partitioned one is made
with the same columns and CHECKs, a partition per month the rows span (and the current
and next months, and a default), the rows are copied with one INSERT ... SELECT, the
keys and indexes are built after the copy (faster than kept up row by row), then the old
table is dropped. The id sequence passes to the new table: ids go on where they were.
SQLite's table is rebuilt with the column (its AUTOINCREMENT and sequence kept).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage import partitions
from cronchain.scheduler.storage.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = (
    "id, job_id, slot, trigger_id, revision, status, reason, attempt, created_at, started_at,"
    " finished_at, deadline, error, start_at, timeout_at, worker, attempts, log, backfill"
)
_INDEXES = (
    "CREATE INDEX ix_invocations_job_id_id ON invocations (job_id, id)",
    "CREATE INDEX ix_invocations_deadline ON invocations (deadline) WHERE deadline IS NOT NULL",
)


def upgrade() -> None:
    op.create_table(
        "invocation_days",
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("statuses", sa.JSON, nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("lag_p50", sa.Float),
        sa.Column("lag_p95", sa.Float),
        sa.Column("lag_p99", sa.Float),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_invocation_days_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "day", name=op.f("pk_invocation_days")),
    )
    op.create_index(op.f("ix_invocation_days_day"), "invocation_days", ["day"])
    if op.get_bind().dialect.name == "postgresql":
        _partition()
    else:
        _sqlite_filed_at(add=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _unpartition()
    else:
        _sqlite_filed_at(add=False)
    op.drop_index(op.f("ix_invocation_days_day"), "invocation_days")
    op.drop_table("invocation_days")


def _partition() -> None:
    run = op.get_bind().exec_driver_sql
    run("ALTER TABLE revokes DROP CONSTRAINT fk_revokes_invocation_id_invocations")
    run("ALTER TABLE invocations RENAME TO invocations_unpartitioned")
    for constraint in (
        "pk_invocations",
        "uq_invocations_job_id_slot",
        "uq_invocations_job_id_trigger_id",
    ):
        run(f"ALTER TABLE invocations_unpartitioned DROP CONSTRAINT {constraint}")
    run("DROP INDEX ix_invocations_job_id_id")
    run("DROP INDEX ix_invocations_deadline")
    run(
        "CREATE TABLE invocations (LIKE invocations_unpartitioned INCLUDING DEFAULTS"
        " INCLUDING CONSTRAINTS, filed_at TIMESTAMPTZ NOT NULL) PARTITION BY RANGE (filed_at)"
    )
    run(
        "ALTER TABLE invocations ADD CONSTRAINT ck_invocations_filed"
        " CHECK (slot IS NULL OR filed_at = slot)"
    )
    run("ALTER SEQUENCE invocations_id_seq OWNED BY invocations.id")
    first, last = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT min(COALESCE(slot, created_at)), max(COALESCE(slot, created_at)), now()"
            " FROM invocations_unpartitioned"
        )
        .one()[:2]
    )
    now = op.get_bind().exec_driver_sql("SELECT now()").scalar()
    first = min(first or now, now)
    last = max(last or now, partitions.add_months(partitions.month_start(now), partitions.AHEAD))
    for month in partitions.missing(op.get_bind(), first, last):
        partitions.create(op.get_bind(), month)
    partitions.create_default(op.get_bind())
    run(
        f"INSERT INTO invocations ({_COLUMNS}, filed_at)"
        f" SELECT {_COLUMNS}, COALESCE(slot, created_at) FROM invocations_unpartitioned"
    )
    run("ALTER TABLE invocations ADD CONSTRAINT pk_invocations PRIMARY KEY (id, filed_at)")
    run(
        "ALTER TABLE invocations ADD CONSTRAINT uq_invocations_job_id_slot"
        " UNIQUE (job_id, slot, filed_at)"
    )
    run(
        "ALTER TABLE invocations ADD CONSTRAINT fk_invocations_job_id_jobs FOREIGN KEY (job_id)"
        " REFERENCES jobs (id) ON DELETE CASCADE"
    )
    for statement in _INDEXES:
        run(statement)
    for statement in partitions.KEYS_DDL:
        run(statement)
    run(
        "INSERT INTO invocation_triggers (job_id, trigger_id, filed_at)"
        " SELECT job_id, trigger_id, COALESCE(slot, created_at) FROM invocations_unpartitioned"
        " WHERE trigger_id IS NOT NULL"
    )
    run("DROP TABLE invocations_unpartitioned")
    run("ANALYZE invocations")


def _unpartition() -> None:
    """The rows back into one table, as 0005 left it (``filed_at`` dropped)."""
    run = op.get_bind().exec_driver_sql
    for statement in partitions.DROP_KEYS_DDL:
        run(statement)
    run("ALTER TABLE invocations RENAME TO invocations_partitioned")
    for constraint in ("pk_invocations", "uq_invocations_job_id_slot"):
        run(f"ALTER TABLE invocations_partitioned DROP CONSTRAINT {constraint}")
    run("DROP INDEX ix_invocations_job_id_id")
    run("DROP INDEX ix_invocations_deadline")
    run(
        "CREATE TABLE invocations (LIKE invocations_partitioned INCLUDING DEFAULTS"
        " INCLUDING CONSTRAINTS)"
    )
    run("ALTER TABLE invocations DROP CONSTRAINT ck_invocations_filed")
    run("ALTER TABLE invocations DROP COLUMN filed_at")
    run("ALTER SEQUENCE invocations_id_seq OWNED BY invocations.id")
    run(f"INSERT INTO invocations ({_COLUMNS}) SELECT {_COLUMNS} FROM invocations_partitioned")
    run("DROP TABLE invocations_partitioned")
    run("ALTER TABLE invocations ADD CONSTRAINT pk_invocations PRIMARY KEY (id)")
    run("ALTER TABLE invocations ADD CONSTRAINT uq_invocations_job_id_slot UNIQUE (job_id, slot)")
    run(
        "ALTER TABLE invocations ADD CONSTRAINT uq_invocations_job_id_trigger_id"
        " UNIQUE (job_id, trigger_id)"
    )
    run(
        "ALTER TABLE invocations ADD CONSTRAINT fk_invocations_job_id_jobs FOREIGN KEY (job_id)"
        " REFERENCES jobs (id) ON DELETE CASCADE"
    )
    for statement in _INDEXES:
        run(statement)
    run(
        "ALTER TABLE revokes ADD CONSTRAINT fk_revokes_invocation_id_invocations"
        " FOREIGN KEY (invocation_id) REFERENCES invocations (id) ON DELETE CASCADE"
    )


def _sqlite_filed_at(*, add: bool) -> None:
    """One rebuild that adds (or drops) the column and its CHECK; SQLite's sequence is
    kept as it was (the rebuild would set it to the largest id, losing 0005's margin)."""
    conn = op.get_bind()
    seq = conn.exec_driver_sql(
        "SELECT seq FROM sqlite_sequence WHERE name = 'invocations'"
    ).scalar()
    if add:
        op.add_column("invocations", sa.Column("filed_at", UTCDateTime))
        op.execute("UPDATE invocations SET filed_at = COALESCE(slot, created_at)")
    with op.batch_alter_table(
        "invocations", recreate="always", table_kwargs={"sqlite_autoincrement": True}
    ) as batch:
        if add:
            batch.alter_column("filed_at", existing_type=UTCDateTime, nullable=False)
            batch.create_check_constraint("filed", "slot IS NULL OR filed_at = slot")
        else:
            batch.drop_constraint(op.f("ck_invocations_filed"), type_="check")
            batch.drop_column("filed_at")
    if seq is not None:
        op.execute(
            f"UPDATE sqlite_sequence SET seq = max(seq, {int(seq)}) WHERE name = 'invocations'"
        )
