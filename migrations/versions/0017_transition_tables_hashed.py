"""0016's statement triggers join a statement's rows before and after by hash, not in N² steps

0016's functions join the transition tables (``after_update``, ``before_update``) on the
run's id, with filters such as ``n.attempt = 1``. A transition table has no statistics,
so each filter is estimated at a default selectivity (0.5% for an equality): the hundred
rows of an outcome group looked like one, and the planner joined the two tables in a
nested loop, scanning one once for each row of the other. Measured in a herd of 20,000,
those joins took 60-130 µs of each run's outcome, more than the update they count, and
grew with the group's size.

Here each function joins the two tables first, unfiltered, with their true sizes known,
and filters the joined rows (``OFFSET 0`` keeps the planner from pushing the filters back
under the join): a hash join, a few microseconds a run. What is counted is unchanged
(``test_migrations`` counts the same statements under 0015's row triggers and these).
SQLite keeps its row triggers.

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

# 0016's functions, whose one join of the two tables is made first and filtered after.
_0016 = import_module("cronchain.migrations.versions.0016_updates_counted_per_statement")
_JOINED = "after_update n JOIN before_update b ON b.id = n.id"
# Each updated run, with what it was before the statement.
_CHANGED = """(
        SELECT n.*, b.status AS was_status, b.worker AS was_worker
        FROM after_update n JOIN before_update b ON b.id = n.id
        OFFSET 0
    ) AS n"""
_REPLACED = ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
_CHANGES = (  # in this order: _CHANGED names ``b.status`` too
    _REPLACED,
    ("b.status", "n.was_status"),
    ("b.worker", "n.was_worker"),
    (_JOINED, _CHANGED),
)


def _hashed(function: str) -> str:
    """``function`` of 0016, its join made before its filters."""
    assert _JOINED in function
    for old, new in _CHANGES:
        function = function.replace(old, new)
    return function


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_hashed(_0016._COUNTERS))
    op.execute(_hashed(_0016._OUTCOMES))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_0016._COUNTERS.replace(*_REPLACED))
    op.execute(_0016._OUTCOMES.replace(*_REPLACED))
