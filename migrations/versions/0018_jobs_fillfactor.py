"""jobs: pages filled to 70%, so that a run's end updates its job in place

A fire writes its job row three times: the tick, then, when the run ends, the outcome
counters (0016's trigger) and the machine's state. The last two change no indexed column,
so PostgreSQL can write them as heap-only tuples, on the row's own page with no new
index entries, but only where the page has room. Packed full (the default fillfactor of
100), a herd's pages had none, and each update wrote a new entry in each of the table's
indexes. With 30% of each page kept free, ``bench.hot_path`` saw more of these updates
made in place, and less of PostgreSQL's CPU per run's end.

Only pages written from now on are filled to 70%; the table is not rewritten (that would
lock it). The cost is room: a table of as many jobs takes up to 1.4 times the pages.
SQLite has no fillfactor.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE jobs SET (fillfactor = 70)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE jobs RESET (fillfactor)")
