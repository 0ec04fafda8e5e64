"""0016's statement triggers pair a statement's runs before and after it by sorting, not a join

0016's functions join the transition tables (``after_update``, ``before_update``) on the
run's id. PostgreSQL plans a trigger function's statement once per session and keeps
the plan, with the sizes of the transition tables it first saw: a session whose first
UPDATE of ``invocations`` changed one run (a lease renewed, a run claimed alone) kept a
nested loop, and the filters of 0016's joins (``n.attempt = 1``, estimated at 0.5%) made
one of a hundred-run statement too. A nested loop scans one table again for every row of
the other: N² steps. In a herd of 20,000 the fire lag's insert alone took 51 µs of each
run's outcome (pg_stat_statements), and it grew with the group's size; in
``bench.hot_path``, 19 µs a fire, and 3.8 µs paired as below.

Here each run is paired with its row before the statement without a join: the two
tables' rows, sorted by run, and the row before read beside the row after (``lag``). A
sort has no plan to choose, whatever the sizes: n log n steps. What is counted is
unchanged (``test_migrations`` counts the same statements under 0015's row triggers
and these). SQLite keeps its row triggers.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from importlib import import_module

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# 0016's functions, their one join of the two tables made a pairing.
_0016 = import_module("cronchain.migrations.versions.0016_updates_counted_per_statement")
_JOINED = "after_update n JOIN before_update b ON b.id = n.id"
# What 0016's functions read of a run; ``side`` 0 is the row before the statement.
_READ = (
    "id, job_id, status, reason, worker, attempt, slot, backfill, started_at, finished_at, filed_at"
)
# Each updated run, with what it was before the statement.
_CHANGED = f"""(
        SELECT * FROM (
            SELECT c.*, lag(c.status) OVER run AS was_status, lag(c.worker) OVER run AS was_worker
            FROM (
                SELECT 0 AS side, {_READ} FROM before_update
                UNION ALL
                SELECT 1 AS side, {_READ} FROM after_update
            ) AS c
            WINDOW run AS (PARTITION BY c.id ORDER BY c.side)
        ) AS paired
        WHERE paired.side = 1
    ) AS n"""
_REPLACED = ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
_CHANGES = (
    _REPLACED,
    ("b.status", "n.was_status"),
    ("b.worker", "n.was_worker"),
    (_JOINED, _CHANGED),
)


def _paired(function: str) -> str:
    """``function`` of 0016, its join a pairing."""
    assert _JOINED in function
    for old, new in _CHANGES:
        function = function.replace(old, new)
    return function


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_paired(_0016._COUNTERS))
    op.execute(_paired(_0016._OUTCOMES))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_0016._COUNTERS.replace(*_REPLACED))
    op.execute(_0016._OUTCOMES.replace(*_REPLACED))
