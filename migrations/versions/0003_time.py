"""time: the first slot missed while paused, backfill runs, a record of each job's changes

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

CHANGES = "'created', 'updated', 'enabled', 'disabled', 'paused', 'resumed'"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("missed_from", UTCDateTime))
    with op.batch_alter_table("invocations") as batch:
        batch.add_column(
            sa.Column("backfill", sa.Boolean, nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("invocations") as batch:
        batch.alter_column("backfill", server_default=None)
    op.create_table(
        "job_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column(
            "job_id",
            sa.Integer,
            sa.ForeignKey("jobs.id", ondelete="CASCADE", name=op.f("fk_job_changes_job_id_jobs")),
            nullable=False,
        ),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("revision", sa.String(32), nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text),
        sa.CheckConstraint(f"change IN ({CHANGES})", name=op.f("ck_job_changes_change")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_changes")),
    )
    op.create_index(op.f("ix_job_changes_job_id_at"), "job_changes", ["job_id", "at"])
    # Jobs that exist already get records that say what is known: their schedule since
    # they were created, enabled since then if they are, paused since their last update.
    columns = "job_id, at, change, revision, schedule, timezone, reason"
    for change, at, where, reason in (
        ("created", "created_at", "", "NULL"),
        ("enabled", "created_at", " WHERE enabled", "NULL"),
        ("paused", "updated_at", " WHERE paused", "pause_reason"),
    ):
        op.execute(
            f"INSERT INTO job_changes ({columns}) SELECT id, {at}, '{change}', revision,"
            f" schedule, timezone, {reason} FROM jobs{where}"
        )


def downgrade() -> None:
    op.drop_index(op.f("ix_job_changes_job_id_at"), "job_changes")
    op.drop_table("job_changes")
    with op.batch_alter_table("invocations") as batch:
        batch.drop_column("backfill")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("missed_from")
