"""ids never reused: SQLite's jobs and invocations get AUTOINCREMENT

SQLite's ``INTEGER PRIMARY KEY`` hands the id of a deleted last row out again; a task id
(``cronchain-<invocation>-<attempt>``), a message or a late outcome naming the deleted
row then matched a new one. With AUTOINCREMENT an id is never handed out twice in the
life of the database. SQLite can only add it by rebuilding the table (batch mode); the
rows and their ids are kept. ``sqlite_sequence`` starts a margin past the largest id
left: ids deleted before the upgrade were above it perhaps, and messages that name them
may still be queued. On PostgreSQL, sequences never hand a value out twice: nothing to
do.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Parents first: a child's rebuild copies rows that reference the rebuilt parent.
TABLES = ("jobs", "invocations")
# How far past the largest id left the new ids start: more than the rows a deployment on
# the embedded default deletes between two upgrades. An empty table (a new database)
# starts from 1.
MARGIN = 1_000_000


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)


def _rebuild(*, autoincrement: bool) -> None:
    """Copy each table into one declared with (or without) AUTOINCREMENT, keeping every
    row, id, constraint and index. ``migrations/env.py`` turns SQLite's foreign keys off
    around a migration and checks every reference before it commits: with them on,
    dropping the old table would first delete every row that references it (ON DELETE
    CASCADE)."""
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass
        if autoincrement:
            op.execute(f"DELETE FROM sqlite_sequence WHERE name = '{table}'")
            op.execute(
                "INSERT INTO sqlite_sequence (name, seq) "
                f"SELECT '{table}', COALESCE(MAX(id) + {MARGIN}, 0) FROM {table}"
            )
