"""jobs.last_success_filed: where the job's latest success is filed (its slot)

A downstream's start asks of each upstream whether a success is filed in its window
(``scheduler.workflows.upstream``). The newest success's filed time answers that from the
upstream's row for every slot but a backfill's: none in the window if it is before it,
one if it is within it. The trigger of 0007 keeps it beside ``last_success_at``, on the
update that makes a run SUCCEEDED, while the job's row is locked already.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION cronchain_last_success() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at,
                    last_success_filed = GREATEST(last_success_filed, NEW.filed_at)
    WHERE id = NEW.job_id;
    RETURN NULL;
END $$
"""
_PG_FUNCTION_BEFORE = """
CREATE OR REPLACE FUNCTION cronchain_last_success() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at WHERE id = NEW.job_id;
    RETURN NULL;
END $$
"""
_SQLITE_TRIGGER = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED'
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at,
                    last_success_filed = max(coalesce(last_success_filed, NEW.filed_at),
                                             NEW.filed_at)
    WHERE id = NEW.job_id;
END
"""
_SQLITE_TRIGGER_BEFORE = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED'
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at WHERE id = NEW.job_id;
END
"""
# Upstreams already required: their newest filed success, from their own runs.
_FILL = """
UPDATE jobs SET last_success_filed = (
    SELECT MAX(i.filed_at) FROM invocations i WHERE i.job_id = jobs.id AND i.status = 'SUCCEEDED'
) WHERE downstream
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("last_success_filed", UTCDateTime()))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
    else:
        op.execute("DROP TRIGGER invocations_last_success")
        op.execute(_SQLITE_TRIGGER)
    op.execute(_FILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION_BEFORE)
    else:
        op.execute("DROP TRIGGER invocations_last_success")
        op.execute(_SQLITE_TRIGGER_BEFORE)
    op.execute("ALTER TABLE jobs DROP COLUMN last_success_filed")
