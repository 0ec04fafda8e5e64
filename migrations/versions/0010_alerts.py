"""alerts, one row per (job, slot, event), and the channels they are sent to

``jobs.alert_failing`` says that a failure alert awaits its ``recovered``, so that a
success of a job with alerts reads its own row rather than the alerts.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("alert_failing", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.create_index(
        "ix_jobs_alerted",
        "jobs",
        ["id"],
        postgresql_where=sa.text("(spec ->> 'alerts') IS NOT NULL"),
        sqlite_where=sa.text("json_extract(spec, '$.alerts') IS NOT NULL"),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("invocation_id", sa.BigInteger(), nullable=False),
        sa.Column("slot", UTCDateTime()),
        sa.Column("event", sa.String(40), nullable=False),
        sa.Column("detail", sa.Text()),
        sa.Column("channels", sa.JSON(), nullable=False),
        sa.Column("delivered", sa.JSON(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("due_at", UTCDateTime()),
        sa.Column("resend_at", UTCDateTime()),
        sa.Column("sent_at", UTCDateTime()),
        sa.CheckConstraint("state IN ('pending', 'sent', 'failed')", name=op.f("ck_alerts_state")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_alerts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint(
            "job_id", "invocation_id", "event", name=op.f("uq_alerts_job_id_invocation_id_event")
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_alerts_job_id_id", "alerts", ["job_id", "id"])
    op.create_index(
        "ix_alerts_due_at",
        "alerts",
        ["due_at"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_table(
        "channels",
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("project", "name", name=op.f("pk_channels")),
    )


def downgrade() -> None:
    op.drop_table("channels")
    op.drop_index("ix_alerts_due_at", table_name="alerts")
    op.drop_index("ix_alerts_job_id_id", table_name="alerts")
    op.drop_table("alerts")
    op.drop_index("ix_jobs_alerted", table_name="jobs")
    op.drop_column("jobs", "alert_failing")
