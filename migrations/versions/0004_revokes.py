"""revokes: the celery tasks to stop, kept until the revoke is sent or the task ends

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "revokes",
        sa.Column("task_id", sa.String(200), nullable=False),
        sa.Column("invocation_id", sa.BigInteger().with_variant(sa.Integer, "sqlite")),
        sa.Column("due_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["invocation_id"],
            ["invocations.id"],
            name=op.f("fk_revokes_invocation_id_invocations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_revokes")),
    )
    op.create_index(op.f("ix_revokes_due_at"), "revokes", ["due_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_revokes_due_at"), "revokes")
    op.drop_table("revokes")
