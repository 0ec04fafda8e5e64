"""jobs.failures, last_failure_at, runs_timed, run_seconds: a job's failures and run time

``/metrics`` reports per job how many runs failed and when the last one did, and the
count and total of its runs' durations (a summary). Read at scrape time from the job's
row, as ``last_success_at`` is (0007): the trigger that keeps that on a run's success
now also keeps these, on its success or its failure, in the same one update of the job's
row, which its transaction has locked already (every writer locks a job before its
runs). A run that failed without starting (its upstreams unmet) counts as a failure and
has no duration; a retried run's duration is its last attempt's, from its claim.

Counting starts at this upgrade (a counter's rate is what Prometheus reads).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

from cronchain.scheduler.storage.models import UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Seconds from the claim of the last attempt to the end (0 for a run that never started).
_PG_SECONDS = "COALESCE(EXTRACT(EPOCH FROM NEW.finished_at - NEW.started_at), 0)"
_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION cronchain_last_success() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'SUCCEEDED' THEN
        UPDATE jobs SET last_success_at = NEW.finished_at,
                        last_success_filed = GREATEST(last_success_filed, NEW.filed_at),
                        runs_timed = runs_timed + 1,
                        run_seconds = run_seconds + {_PG_SECONDS}
        WHERE id = NEW.job_id;
    ELSE
        UPDATE jobs SET last_failure_at = NEW.finished_at,
                        failures = failures + 1,
                        runs_timed = runs_timed + (NEW.started_at IS NOT NULL)::int,
                        run_seconds = run_seconds + {_PG_SECONDS}
        WHERE id = NEW.job_id;
    END IF;
    RETURN NULL;
END $$
"""
_PG_TRIGGER = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN (NEW.status IN ('SUCCEEDED', 'FAILED') AND OLD.status <> NEW.status)
EXECUTE FUNCTION cronchain_last_success()
"""
# 0013's, to go back to.
_PG_FUNCTION_BEFORE = """
CREATE OR REPLACE FUNCTION cronchain_last_success() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at,
                    last_success_filed = GREATEST(last_success_filed, NEW.filed_at)
    WHERE id = NEW.job_id;
    RETURN NULL;
END $$
"""
_PG_TRIGGER_BEFORE = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN (NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED')
EXECUTE FUNCTION cronchain_last_success()
"""
_SQLITE_SECONDS = "coalesce((julianday(NEW.finished_at) - julianday(NEW.started_at)) * 86400.0, 0)"
_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
    FOR EACH ROW WHEN NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED'
    BEGIN
        UPDATE jobs SET last_success_at = NEW.finished_at,
                        last_success_filed = max(coalesce(last_success_filed, NEW.filed_at),
                                                 NEW.filed_at),
                        runs_timed = runs_timed + 1,
                        run_seconds = run_seconds + {_SQLITE_SECONDS}
        WHERE id = NEW.job_id;
    END
    """,
    f"""
    CREATE TRIGGER invocations_failed AFTER UPDATE OF status ON invocations
    FOR EACH ROW WHEN NEW.status = 'FAILED' AND OLD.status <> 'FAILED'
    BEGIN
        UPDATE jobs SET last_failure_at = NEW.finished_at,
                        failures = failures + 1,
                        runs_timed = runs_timed + (NEW.started_at IS NOT NULL),
                        run_seconds = run_seconds + {_SQLITE_SECONDS}
        WHERE id = NEW.job_id;
    END
    """,
)
_SQLITE_TRIGGER_BEFORE = """
CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
FOR EACH ROW WHEN NEW.status = 'SUCCEEDED' AND OLD.status <> 'SUCCEEDED'
BEGIN
    UPDATE jobs SET last_success_at = NEW.finished_at,
                    last_success_filed = max(coalesce(last_success_filed, NEW.filed_at),
                                             NEW.filed_at)
    WHERE id = NEW.job_id;
END
"""
_COLUMNS = (
    ("failures", sa.BigInteger(), "0"),
    ("runs_timed", sa.BigInteger(), "0"),
    ("run_seconds", sa.Float(), "0"),
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("last_failure_at", UTCDateTime()))
    for name, kind, zero in _COLUMNS:
        op.add_column("jobs", sa.Column(name, kind, nullable=False, server_default=zero))
    op.execute("DROP TRIGGER invocations_last_success" + _on_table())
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    op.execute("DROP TRIGGER invocations_last_success" + _on_table())
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION_BEFORE)
        op.execute(_PG_TRIGGER_BEFORE)
    else:
        op.execute("DROP TRIGGER invocations_failed")
        op.execute(_SQLITE_TRIGGER_BEFORE)
    for name in ("run_seconds", "runs_timed", "failures", "last_failure_at"):
        op.execute(f"ALTER TABLE jobs DROP COLUMN {name}")


def _on_table() -> str:
    """PostgreSQL names the table a trigger is dropped from; SQLite does not."""
    return " ON invocations" if op.get_bind().dialect.name == "postgresql" else ""
