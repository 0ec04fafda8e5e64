"""runs inserted ended are counted once per statement, not once per row

Migration 0008 counted each run inserted ended (a tick batch's skipped slots, a bulk
load) with a row trigger that added one to its counter row. Every addition in one
transaction makes a new version of the same row, and each finds the row by walking
the versions before it: a statement inserting N such runs cost N²/2 steps (20,000
rows: 2.8 s; 400,000: about 19 minutes). On PostgreSQL the insert is now counted by
one statement trigger over the rows it inserted (a transition table), one addition
per (status, reason). Updates keep 0008's row triggers: an UPDATE ends the runs of one
outcome group or one job, never a bulk load. SQLite's upsert has no versions to walk:
it keeps its row trigger.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_ENDED = "('SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED')"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER invocations_count_ended_new ON invocations")
    op.execute(
        f"""
        CREATE FUNCTION cronchain_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO slot_outcomes AS o (status, reason, shard, count)
            SELECT status, COALESCE(reason, ''), pg_backend_pid(), count(*)
            FROM inserted WHERE status IN {_ENDED} GROUP BY 1, 2
            ON CONFLICT (status, reason, shard) DO UPDATE SET count = o.count + excluded.count;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER invocations_count_inserted AFTER INSERT ON invocations
        REFERENCING NEW TABLE AS inserted
        FOR EACH STATEMENT EXECUTE FUNCTION cronchain_count_inserted()
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER invocations_count_inserted ON invocations")
    op.execute("DROP FUNCTION cronchain_count_inserted()")
    op.execute(
        f"""
        CREATE TRIGGER invocations_count_ended_new AFTER INSERT ON invocations
        FOR EACH ROW WHEN (NEW.status IN {_ENDED}) EXECUTE FUNCTION cronchain_count_ended()
        """
    )
