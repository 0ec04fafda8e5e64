"""jobs and invocations

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JOB_STATES = "'DISABLED', 'SCHEDULED', 'SUSPENDED', 'QUEUED', 'RUNNING', 'OVERRUN'"
STATUSES = "'STARTING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED'"


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("revision", sa.String(32), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("pause_reason", sa.Text),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("tick_at", UTCDateTime),
        sa.Column("tick_nonce", sa.BigInteger),
        sa.Column("watchdog_at", UTCDateTime),
        sa.Column("invocation_id", sa.BigInteger),
        sa.Column("invocation_running", sa.Boolean, nullable=False),
        sa.Column("overruns", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("project", "name", name="uq_jobs_project_name"),
        sa.CheckConstraint(f"state IN ({JOB_STATES})", name="ck_jobs_state"),
        sa.CheckConstraint("(tick_at IS NULL) = (tick_nonce IS NULL)", name="ck_jobs_tick"),
        sa.CheckConstraint(
            "state NOT IN ('DISABLED', 'SUSPENDED') OR tick_nonce IS NULL",
            name="ck_jobs_idle_no_tick",
        ),
        sa.CheckConstraint(
            "tick_nonce IS NOT NULL OR watchdog_at IS NULL", name="ck_jobs_watchdog_tick"
        ),
        sa.CheckConstraint("state <> 'DISABLED' OR NOT enabled", name="ck_jobs_disabled"),
        sa.CheckConstraint("state <> 'SUSPENDED' OR paused", name="ck_jobs_suspended"),
    )
    op.create_index("ix_jobs_watchdog_at", "jobs", ["watchdog_at"])
    op.create_table(
        "invocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("slot", UTCDateTime),
        sa.Column("trigger_id", sa.String(64)),
        sa.Column("revision", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("started_at", UTCDateTime),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("deadline", UTCDateTime),
        sa.Column("error", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_invocations"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], ondelete="CASCADE", name="fk_invocations_job_id_jobs"
        ),
        sa.UniqueConstraint("job_id", "slot", name="uq_invocations_job_id_slot"),
        sa.UniqueConstraint("job_id", "trigger_id", name="uq_invocations_job_id_trigger_id"),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="ck_invocations_status"),
        sa.CheckConstraint("slot IS NOT NULL OR trigger_id IS NOT NULL", name="ck_invocations_key"),
        sa.CheckConstraint(
            "(status IN ('STARTING', 'RUNNING')) = (finished_at IS NULL)",
            name="ck_invocations_finished",
        ),
        sa.CheckConstraint(
            "status = 'STARTING' OR status = 'SKIPPED' OR started_at IS NOT NULL",
            name="ck_invocations_started",
        ),
        sa.CheckConstraint(
            "status <> 'SKIPPED' OR reason IS NOT NULL", name="ck_invocations_skipped_reason"
        ),
    )
    op.create_index("ix_invocations_job_id_id", "invocations", ["job_id", "id"])
    op.create_index(
        "ix_invocations_deadline",
        "invocations",
        ["deadline"],
        postgresql_where=sa.text("deadline IS NOT NULL"),
        sqlite_where=sa.text("deadline IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("invocations")
    op.drop_table("jobs")
