"""Alembic migrations: the only way cronchain's schema changes.

``cronchain db upgrade`` calls :func:`upgrade`; the scripts live in ``versions/``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

HERE = Path(__file__).parent


def config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["engine"] = engine
    return cfg


def current(engine: Engine) -> str | None:
    """The revision the database is at; None if it was never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(config(engine), revision)
