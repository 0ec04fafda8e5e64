"""what /metrics and /healthz read: jobs.last_success_at, the watchdog's passes, waiting runs

``cronchain serve`` computes its metrics and health from the database at scrape time,
reading indexes only, never the history (``invocations`` holds months of runs):

- ``jobs.last_success_at``: when the job's newest success finished. A trigger keeps it,
  on the update that makes a run SUCCEEDED (a run is never inserted SUCCEEDED): the job
  row is locked by then (every writer locks a job before its runs), so it adds one
  update of a row already held, and no statement of the engine's changes.
- ``watchdog``: one row, the time of the watchdog's last pass and its repairs counted
  by kind (``scheduler.maintenance.watchdog.sweep`` writes it after each pass).
- ``ix_jobs_tick_at``: overdue ticks, found without reading every job.
- ``ix_invocations_waiting``: the WAITING runs, by reason, from a partial index that
  holds those rows only. On PostgreSQL the index is built on every partition: on a large
  history this reads the table once, at the upgrade.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_PG_FUNCTION = """
CREATE FUNCTION cronchain_last_success() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at WHERE id = NEW.job_id;
    RETURN NULL;
END $$
"""
_PG_TRIGGER = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN (NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED')
EXECUTE FUNCTION cronchain_last_success()
"""
_SQLITE_TRIGGER = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED'
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at WHERE id = NEW.job_id;
END
"""
_PG_LAST_SUCCESS = """
UPDATE jobs SET last_success_at = s.at
FROM (SELECT job_id, MAX(finished_at) AS at FROM invocations WHERE status = 'SUCCEEDED'
      GROUP BY job_id) AS s
WHERE s.job_id = jobs.id
"""
_LAST_SUCCESS = """
UPDATE jobs SET last_success_at = (SELECT MAX(i.finished_at) FROM invocations i
                                   WHERE i.job_id = jobs.id AND i.status = 'SUCCEEDED')
"""
_REPAIRS = ("ticks", "starts", "expired", "resent", "revokes")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("last_success_at", UTCDateTime()))
    op.create_index("ix_jobs_tick_at", "jobs", ["tick_at"])
    op.create_index(
        "ix_invocations_waiting",
        "invocations",
        ["reason", "backfill"],
        postgresql_where=sa.text("status = 'WAITING'"),
        sqlite_where=sa.text("status = 'WAITING'"),
    )
    op.create_table(
        "watchdog",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("passed_at", UTCDateTime(), nullable=False),
        *(sa.Column(kind, sa.BigInteger(), nullable=False) for kind in _REPAIRS),
        sa.CheckConstraint("id = 1", name=op.f("ck_watchdog_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_watchdog")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)
    # Jobs that succeeded before the upgrade: their newest success, from one read of
    # the history (the index above reads it once too).
    op.execute(_PG_LAST_SUCCESS if op.get_bind().dialect.name == "postgresql" else _LAST_SUCCESS)


def downgrade() -> None:
    op.execute("DROP TRIGGER invocations_last_success" + _on_invocations())
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION cronchain_last_success()")
    op.drop_table("watchdog")
    op.drop_index("ix_invocations_waiting", "invocations")
    op.drop_index("ix_jobs_tick_at", "jobs")
    # SQLite 3.35+ drops a column in place (a batch rebuild would lose AUTOINCREMENT).
    op.execute("ALTER TABLE jobs DROP COLUMN last_success_at")


def _on_invocations() -> str:
    return " ON invocations" if op.get_bind().dialect.name == "postgresql" else ""
