"""invocation control: active and buffered counts, attempts, leases, timeouts, logs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# 0001 spelled out names that the naming convention then prefixed again: its checks are
# called ck_invocations_ck_invocations_status and so on. Names here are final (op.f).
OLD = "'STARTING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED'"
NEW = f"{OLD}, 'WAITING'"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("active", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("buffered", sa.Integer, nullable=False, server_default="0"))
    # The machine now counts active invocations instead of naming one.
    op.execute(
        "UPDATE jobs SET active = (SELECT count(*) FROM invocations i WHERE i.job_id = jobs.id"
        " AND i.status IN ('STARTING', 'RUNNING'))"
    )
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("active", server_default=None)
        batch.alter_column("buffered", server_default=None)
        batch.create_check_constraint(op.f("ck_jobs_counts"), "active >= 0 AND buffered >= 0")
    with op.batch_alter_table("invocations") as batch:
        batch.add_column(sa.Column("start_at", UTCDateTime))
        batch.add_column(sa.Column("timeout_at", UTCDateTime))
        batch.add_column(sa.Column("worker", sa.String(200)))
        batch.add_column(sa.Column("attempts", sa.JSON))
        batch.add_column(sa.Column("log", sa.Text))
        batch.drop_constraint(op.f("ck_invocations_ck_invocations_status"), type_="check")
        batch.drop_constraint(op.f("ck_invocations_ck_invocations_finished"), type_="check")
        batch.drop_constraint(op.f("ck_invocations_ck_invocations_started"), type_="check")
        batch.create_check_constraint(op.f("ck_invocations_status"), f"status IN ({NEW})")
        batch.create_check_constraint(
            op.f("ck_invocations_finished"),
            "(status IN ('WAITING', 'STARTING', 'RUNNING')) = (finished_at IS NULL)",
        )
        batch.create_check_constraint(
            op.f("ck_invocations_started"),
            "status NOT IN ('RUNNING', 'SUCCEEDED') OR started_at IS NOT NULL",
        )


def downgrade() -> None:
    op.execute("DELETE FROM invocations WHERE status = 'WAITING'")
    op.execute(
        "UPDATE invocations SET started_at = created_at WHERE started_at IS NULL"
        " AND status IN ('FAILED', 'ABORTED')"
    )
    with op.batch_alter_table("invocations") as batch:
        batch.drop_constraint(op.f("ck_invocations_status"), type_="check")
        batch.drop_constraint(op.f("ck_invocations_finished"), type_="check")
        batch.drop_constraint(op.f("ck_invocations_started"), type_="check")
        batch.create_check_constraint(
            op.f("ck_invocations_ck_invocations_status"), f"status IN ({OLD})"
        )
        batch.create_check_constraint(
            op.f("ck_invocations_ck_invocations_finished"),
            "(status IN ('STARTING', 'RUNNING')) = (finished_at IS NULL)",
        )
        batch.create_check_constraint(
            op.f("ck_invocations_ck_invocations_started"),
            "status = 'STARTING' OR status = 'SKIPPED' OR started_at IS NOT NULL",
        )
        for column in ("log", "attempts", "worker", "timeout_at", "start_at"):
            batch.drop_column(column)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_counts"), type_="check")
        batch.drop_column("buffered")
        batch.drop_column("active")
