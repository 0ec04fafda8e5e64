"""Alembic environment: runs online against the engine handed in by ``migrations``."""

from alembic import context

from scheduler.storage.models import metadata

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
