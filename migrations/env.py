"""Alembic environment: runs online against the engine handed in by ``migrations``.

On SQLite, a migration that changes a table rebuilds it (batch mode): a new table, the
rows copied, the old one dropped. With foreign keys on, SQLite deletes the rows that
reference a dropped table (ON DELETE CASCADE) before it drops it, so a rebuild of
``jobs`` would empty ``invocations``. Foreign keys are off while migrations run (a
pragma that SQLite ignores inside a transaction: it is set before the migration's
begins), every reference is checked before the commit, and they are on again after.
"""

from alembic import context

from cronchain.scheduler.storage.models import metadata

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:  # no transaction is open yet: the pragma takes effect
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
    try:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=sqlite,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"a migration broke references: {broken[:5]}")
        connection.commit()
    finally:
        if sqlite:  # the connection goes back to the pool: as make_engine made it
            connection.rollback()
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")
