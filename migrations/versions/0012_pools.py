"""pools: named numbers of places shared by jobs, and the pool of each run

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import POOLED, UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("size >= 0", name=op.f("ck_pools_size")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.add_column("invocations", sa.Column("pool", sa.String(100)))
    op.create_index(
        "ix_invocations_pool",
        "invocations",
        ["pool", "status"],
        postgresql_where=sa.text(POOLED),
        sqlite_where=sa.text(POOLED),
    )


def downgrade() -> None:
    op.drop_index("ix_invocations_pool", table_name="invocations")
    op.drop_column("invocations", "pool")
    op.drop_table("pools")
