"""job_changes.days: whether the schedule in force wanted both day fields to match

A job's ``days: both`` changes which days its cron schedule names, so ``explain`` must
know it for each change, as it knows the schedule and the zone. NULL is cron's rule
(either day field), which every change recorded before this upgrade had.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_changes") as batch:
        batch.add_column(sa.Column("days", sa.String(8)))
        batch.create_check_constraint(op.f("ck_job_changes_days"), "days IN ('both')")


def downgrade() -> None:
    with op.batch_alter_table("job_changes") as batch:
        batch.drop_constraint(op.f("ck_job_changes_days"), type_="check")
        batch.drop_column("days")
