"""runs ended or claimed by an UPDATE are counted once per statement, not once per row

An outcome group (``scheduler.core.outcome_batch``), and a batch of no-ops claimed and
recorded together, end a hundred runs with one UPDATE. On each of them, three row
triggers ran: 0008's added one to a counter row (``slot_outcomes`` at the end,
``fire_lags`` at the first claim), and 0014's updated the run's job. A hundred additions
to the same counter row in one transaction make a hundred versions of it, each found by
walking the ones before it, as 0009 found for inserts. Measured on such statements, the
three triggers took 60-125 µs per run, more than the update itself. On PostgreSQL two
statement triggers now do their work over the rows each UPDATE changed (transition
tables, before and after): one addition per counter row, one update per job. What is
counted is unchanged; of two runs of one job that end in one statement, the job keeps
the later end.

A trigger with transition tables cannot name its columns (0008's ``UPDATE OF status``),
so these run on every UPDATE of ``invocations`` (a lease renewed, a log appended) and
find nothing to count in most. The upgrade locks ``invocations`` and its partitions, as
0009's did, for a moment. SQLite keeps its row triggers. 0008's and 0014's functions
stay, for the downgrade.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_ENDED = "('SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED')"
# FIRE_LAG_BUCKETS, as 0008 has them.
_BUCKETS = ("0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "300", "900")
_BUCKET = (
    "CASE " + " ".join(f"WHEN lag <= {le} THEN '{le}'" for le in _BUCKETS) + " ELSE '+Inf' END"
)
_SECONDS = "COALESCE(EXTRACT(EPOCH FROM n.finished_at - n.started_at), 0)"

_COUNTERS = f"""
CREATE FUNCTION cronchain_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO slot_outcomes AS o (status, reason, shard, count)
    SELECT n.status, COALESCE(n.reason, ''), pg_backend_pid(), count(*)
    FROM after_update n JOIN before_update b ON b.id = n.id
    WHERE n.status IN {_ENDED} AND b.status NOT IN {_ENDED}
    GROUP BY 1, 2
    ON CONFLICT (status, reason, shard) DO UPDATE SET count = o.count + excluded.count;

    INSERT INTO fire_lags AS f (le, shard, count, seconds)
    SELECT {_BUCKET}, pg_backend_pid(), count(*), sum(lag)
    FROM (
        SELECT EXTRACT(EPOCH FROM n.started_at - n.slot)::float8 AS lag
        FROM after_update n JOIN before_update b ON b.id = n.id
        WHERE b.worker IS NULL AND n.worker IS NOT NULL AND n.attempt = 1
          AND n.slot IS NOT NULL AND NOT n.backfill
    ) AS claimed
    GROUP BY 1
    ON CONFLICT (le, shard) DO UPDATE
    SET count = f.count + excluded.count, seconds = f.seconds + excluded.seconds;

    RETURN NULL;
END $$
"""
_OUTCOMES = f"""
CREATE FUNCTION cronchain_job_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET
        last_success_at = COALESCE(e.success_at, jobs.last_success_at),
        last_success_filed = GREATEST(jobs.last_success_filed, e.success_filed),
        last_failure_at = COALESCE(e.failure_at, jobs.last_failure_at),
        failures = jobs.failures + e.failures,
        runs_timed = jobs.runs_timed + e.timed,
        run_seconds = jobs.run_seconds + e.seconds
    FROM (
        SELECT n.job_id,
               max(n.finished_at) FILTER (WHERE n.status = 'SUCCEEDED') AS success_at,
               max(n.filed_at) FILTER (WHERE n.status = 'SUCCEEDED') AS success_filed,
               max(n.finished_at) FILTER (WHERE n.status = 'FAILED') AS failure_at,
               count(*) FILTER (WHERE n.status = 'FAILED') AS failures,
               count(*) FILTER (WHERE n.status = 'SUCCEEDED' OR n.started_at IS NOT NULL)
                   AS timed,
               sum({_SECONDS}) AS seconds
        FROM after_update n JOIN before_update b ON b.id = n.id
        WHERE n.status IN ('SUCCEEDED', 'FAILED') AND b.status <> n.status
        GROUP BY n.job_id
    ) AS e
    WHERE jobs.id = e.job_id;
    RETURN NULL;
END $$
"""
# Two triggers, so that the counters can be turned off alone (``bench.hot_path
# --counters``): the job's outcomes are what ``requires`` reads. They share the
# statement's transition tables.
_TRIGGERS = {
    "invocations_count_updated": "cronchain_count_updated",
    "invocations_job_outcomes": "cronchain_job_outcomes",
}
_TRIGGER = """
CREATE TRIGGER {name} AFTER UPDATE ON invocations
REFERENCING OLD TABLE AS before_update NEW TABLE AS after_update
FOR EACH STATEMENT EXECUTE FUNCTION {function}()
"""
# The row triggers this replaces, as 0008 and 0014 left them: to go back to.
_ROW_TRIGGERS = {
    "invocations_count_ended": f"""
        CREATE TRIGGER invocations_count_ended AFTER UPDATE OF status ON invocations
        FOR EACH ROW WHEN (NEW.status IN {_ENDED} AND OLD.status NOT IN {_ENDED})
        EXECUTE FUNCTION cronchain_count_ended()
    """,
    "invocations_count_lag": """
        CREATE TRIGGER invocations_count_lag AFTER UPDATE OF worker ON invocations
        FOR EACH ROW WHEN (OLD.worker IS NULL AND NEW.worker IS NOT NULL AND NEW.attempt = 1
                           AND NEW.slot IS NOT NULL AND NOT NEW.backfill)
        EXECUTE FUNCTION cronchain_count_lag()
    """,
    "invocations_last_success": """
        CREATE TRIGGER invocations_last_success AFTER UPDATE OF status ON invocations
        FOR EACH ROW WHEN (NEW.status IN ('SUCCEEDED', 'FAILED') AND OLD.status <> NEW.status)
        EXECUTE FUNCTION cronchain_last_success()
    """,
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in _ROW_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON invocations")
    op.execute(_COUNTERS)
    op.execute(_OUTCOMES)
    for name, function in _TRIGGERS.items():
        op.execute(_TRIGGER.format(name=name, function=function))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, function in _TRIGGERS.items():
        op.execute(f"DROP TRIGGER {name} ON invocations")
        op.execute(f"DROP FUNCTION {function}()")
    for create in _ROW_TRIGGERS.values():
        op.execute(create)
