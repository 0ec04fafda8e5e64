"""requires: which jobs each job waits for, the upstreams' flag, and a run's checks

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("downstream", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("invocations", sa.Column("checks", sa.JSON()))
    op.create_table(
        "requirements",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_requirements_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "project", "name", name=op.f("pk_requirements")),
    )
    op.create_index("ix_requirements_upstream", "requirements", ["project", "name"])


def downgrade() -> None:
    op.drop_index("ix_requirements_upstream", table_name="requirements")
    op.drop_table("requirements")
    op.drop_column("invocations", "checks")
    op.drop_column("jobs", "downstream")
