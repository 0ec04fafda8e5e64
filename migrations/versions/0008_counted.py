"""slots by outcome and the fire lag, counted as runs end and start

``/metrics`` reports every run that ended, by outcome and reason, and a histogram of
the fire lag (claim minus slot), as counters. Counting them at scrape time would read
the history (months of runs); so triggers on ``invocations`` count them as they happen,
in the transaction that ends or claims the run, whatever code path wrote it (a tick
batch's skips, an outcome group, an abort, the watchdog's expiries):

- ``slot_outcomes``: a run that becomes SUCCEEDED, FAILED, ABORTED or SKIPPED (inserted
  so, or updated to it from any other status) adds one to (status, reason);
- ``fire_lags``: the first claim of a slot's first attempt (``worker`` set where it was
  NULL; not a backfill or a triggered run) adds one to its bucket, and the lag to the
  bucket's seconds. The buckets' bounds are ``scheduler.storage.models.FIRE_LAG_BUCKETS``.

On PostgreSQL each backend counts in rows of its own (``shard``: its process id), so
that two transactions never wait for each other on a counter, nor deadlock over two;
the watchdog folds the rows of backends gone into shard 0
(``scheduler.storage.observed.fold_counters``). SQLite has one writer: shard 0. Counting
starts at this upgrade (a counter's rate is what Prometheus reads, not its level).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ENDED = "('SUCCEEDED', 'FAILED', 'ABORTED', 'SKIPPED')"
# FIRE_LAG_BUCKETS, as of this revision (a later change of the bounds is a migration).
_BUCKETS = ("0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "300", "900")
_CLAIMED = (
    "OLD.worker IS NULL AND NEW.worker IS NOT NULL AND NEW.attempt = 1"
    " AND NEW.slot IS NOT NULL AND NOT NEW.backfill"
)


def _bucket(lag: str) -> str:
    cases = " ".join(f"WHEN {lag} <= {le} THEN '{le}'" for le in _BUCKETS)
    return f"CASE {cases} ELSE '+Inf' END"


_PG = (
    """
    CREATE FUNCTION cronchain_count_ended() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO slot_outcomes AS o (status, reason, shard, count)
        VALUES (NEW.status, COALESCE(NEW.reason, ''), pg_backend_pid(), 1)
        ON CONFLICT (status, reason, shard) DO UPDATE SET count = o.count + 1;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION cronchain_count_lag() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        lag float8 := EXTRACT(EPOCH FROM NEW.started_at - NEW.slot)::float8;
    BEGIN
        INSERT INTO fire_lags AS f (le, shard, count, seconds)
        VALUES ({_bucket("lag")}, pg_backend_pid(), 1, lag)
        ON CONFLICT (le, shard) DO UPDATE SET count = f.count + 1, seconds = f.seconds + lag;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE TRIGGER invocations_count_ended_new AFTER INSERT ON invocations
    FOR EACH ROW WHEN (NEW.status IN {_ENDED}) EXECUTE FUNCTION cronchain_count_ended()
    """,
    f"""
    CREATE TRIGGER invocations_count_ended AFTER UPDATE OF status ON invocations
    FOR EACH ROW WHEN (NEW.status IN {_ENDED} AND OLD.status NOT IN {_ENDED})
    EXECUTE FUNCTION cronchain_count_ended()
    """,
    f"""
    CREATE TRIGGER invocations_count_lag AFTER UPDATE OF worker ON invocations
    FOR EACH ROW WHEN ({_CLAIMED}) EXECUTE FUNCTION cronchain_count_lag()
    """,
)
_SQLITE_ENDED = """
    INSERT INTO slot_outcomes (status, reason, shard, count)
    VALUES (NEW.status, COALESCE(NEW.reason, ''), 0, 1)
    ON CONFLICT (status, reason, shard) DO UPDATE SET count = count + 1;
"""
_SQLITE_LAG = "((julianday(NEW.started_at) - julianday(NEW.slot)) * 86400.0)"
_SQLITE = (
    f"""
    CREATE TRIGGER invocations_count_ended_new AFTER INSERT ON invocations
    FOR EACH ROW WHEN NEW.status IN {_ENDED} BEGIN {_SQLITE_ENDED} END
    """,
    f"""
    CREATE TRIGGER invocations_count_ended AFTER UPDATE OF status ON invocations
    FOR EACH ROW WHEN NEW.status IN {_ENDED} AND OLD.status NOT IN {_ENDED}
    BEGIN {_SQLITE_ENDED} END
    """,
    f"""
    CREATE TRIGGER invocations_count_lag AFTER UPDATE OF worker ON invocations
    FOR EACH ROW WHEN {_CLAIMED}
    BEGIN
        INSERT INTO fire_lags (le, shard, count, seconds)
        VALUES ({_bucket(_SQLITE_LAG)}, 0, 1, {_SQLITE_LAG})
        ON CONFLICT (le, shard) DO UPDATE
        SET count = count + 1, seconds = seconds + excluded.seconds;
    END
    """,
)
_TRIGGERS = ("invocations_count_lag", "invocations_count_ended", "invocations_count_ended_new")


def upgrade() -> None:
    op.create_table(
        "slot_outcomes",
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("status", "reason", "shard", name=op.f("pk_slot_outcomes")),
    )
    op.create_table(
        "fire_lags",
        sa.Column("le", sa.String(8), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("le", "shard", name=op.f("pk_fire_lags")),
    )
    for statement in _PG if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}" + (" ON invocations" if postgresql else ""))
    if postgresql:
        op.execute("DROP FUNCTION cronchain_count_lag()")
        op.execute("DROP FUNCTION cronchain_count_ended()")
    op.drop_table("fire_lags")
    op.drop_table("slot_outcomes")
