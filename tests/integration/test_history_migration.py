"""0006 moves an existing unpartitioned ``invocations`` of 1M rows into monthly
partitions without losing or changing a row, and the keys still hold after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy

from cronchain.migrations import downgrade, upgrade
from cronchain.scheduler.storage import partitions, run_store
from cronchain.scheduler.storage.db import make_engine
from tests.support import services

pytestmark = pytest.mark.postgres

ROWS = 1_000_000
JOBS = 1000
# Every row, as a number: ids, keys, states and times all count.
FINGERPRINT = """
SELECT count(*), sum(id), max(id), count(trigger_id), count(DISTINCT job_id),
       sum(hashtext(row(id, job_id, slot, trigger_id, revision, status, reason, attempt,
                        created_at, started_at, finished_at, backfill)::text)::bigint)
FROM invocations
"""


@pytest.fixture
def private(pg_admin: sqlalchemy.Engine) -> Iterator[sqlalchemy.Engine]:
    """A database of its own, migrated to 0005 and filled by SQL: 1,000 jobs, 1M runs
    over four months, one in a hundred triggered (no slot)."""
    name = services.create_database(pg_admin)
    engine = make_engine(services.database_url(name))
    upgrade(engine, "0005")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision, enabled,"
            " paused, state, generation, invocation_running, overruns, active, buffered,"
            " created_at, updated_at) SELECT 'm', 'job' || g, 'noop', '0 * * * *', 'UTC', '{}',"
            " 'r1', true, false, 'SCHEDULED', 0, false, 0, 0, 0, '2025-12-01', '2025-12-01'"
            f" FROM generate_series(1, {JOBS}) g"
        )
        conn.exec_driver_sql(
            """
            INSERT INTO invocations (job_id, slot, trigger_id, revision, status, reason, attempt,
                created_at, started_at, finished_at, backfill)
            SELECT 1 + g %% %(jobs)s,
                   CASE WHEN g %% 100 = 0 THEN NULL ELSE t END,
                   CASE WHEN g %% 100 = 0 THEN 'trigger-' || g END,
                   'r1',
                   CASE WHEN g %% 7 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
                   CASE WHEN g %% 7 = 0 THEN 'timeout' END,
                   1, t, t + interval '1 second', t + interval '2 seconds', false
            FROM generate_series(0, %(rows)s - 1) AS g,
                 LATERAL (SELECT timestamptz '2026-01-01' + (g / %(jobs)s) * interval '3 hours'
                          AS t) AS s
            """.replace("%(jobs)s", str(JOBS)).replace("%(rows)s", str(ROWS))
        )
        conn.exec_driver_sql(
            "INSERT INTO revokes VALUES ('cronchain-5-1', 5, '2026-01-01 00:00:00+00')"
        )
    yield engine
    engine.dispose()
    services.drop_database(pg_admin, name)


def fingerprint(engine: sqlalchemy.Engine) -> tuple[object, ...]:
    with engine.connect() as conn:
        return tuple(conn.exec_driver_sql(FINGERPRINT).one())


def test_a_million_rows_move_into_monthly_partitions_and_back(private: sqlalchemy.Engine):
    before = fingerprint(private)
    assert before[:5] == (ROWS, ROWS * (ROWS + 1) // 2, ROWS, ROWS // 100, JOBS)
    upgrade(private)
    assert fingerprint(private) == before
    with private.connect() as conn:
        assert partitions.is_partitioned(conn)
        names = [m.name for m in partitions.months(conn)]
        placed = conn.exec_driver_sql(
            "SELECT tableoid::regclass::text, count(*) FROM invocations GROUP BY 1 ORDER BY 1"
        ).all()
        misfiled = conn.exec_driver_sql(
            "SELECT count(*) FROM invocations WHERE filed_at <> COALESCE(slot, created_at)"
        ).scalar()
        keys = conn.exec_driver_sql("SELECT count(*) FROM invocation_triggers").scalar()
        revokes = conn.exec_driver_sql("SELECT count(*) FROM revokes").scalar()
    # 2026-01-01 + 999 * 3 h is in May: January to May hold every row, none in default.
    assert names[:5] == [f"invocations_p2026_{m:02d}" for m in range(1, 6)]
    assert dict(placed).keys() == set(names[:5])
    assert sum(n for _, n in placed) == ROWS
    assert misfiled == 0 and keys == ROWS // 100 and revokes == 1

    # The keys hold on the moved rows; ids go on after the largest.
    slot = datetime(2026, 1, 1, 3, tzinfo=UTC)  # g = 1001: job 2's slot at 03:00
    with private.begin() as conn:
        common = dict(revision="r1", status="STARTING", now=slot)
        assert run_store.insert_invocation(conn, 2, slot=slot, trigger_id=None, **common) is None
        taken = dict(slot=None, trigger_id="trigger-100")  # g = 100: job 101
        assert run_store.insert_invocation(conn, 101, **taken, **common) is None
        new = run_store.insert_invocation(conn, 1, slot=None, trigger_id="new", **common)
    assert new is not None and new > ROWS  # refused inserts draw ids too

    with private.begin() as conn:
        conn.exec_driver_sql("DELETE FROM invocations WHERE id = %(id)s", {"id": new})
    downgrade(private, "0005")
    assert fingerprint(private) == before
