"""jobs: pages filled to 70%, so that a run's end updates its job in place

A fire writes its job row three times: the tick, then, when the run ends, the outcome
counters (0016's trigger) and the machine's state. The last two change no indexed column
(but for a fixed-delay job, whose end arms its next tick), so PostgreSQL can write them
as heap-only tuples, on the row's own page with no new index entries, but only where the
page has room. Packed full (the default fillfactor of 100), a herd's pages had none, and
each update wrote a new entry in each of the table's indexes. In ``bench.hot_path``
(2,000 jobs, autovacuum off), 0.4 of those two updates a run were made in place at 100,
1.7 at 70; PostgreSQL's CPU per fire on the work path went from 0.185-0.209 to
0.149-0.175 ms (three alternations).

Only pages written from now on are filled to 70%; the table is not rewritten (that would
lock it). The cost is room: as many jobs take up to about 1.4 times the pages.
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
