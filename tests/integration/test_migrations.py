"""Migrations go up, down and up again, and the migrated schema is the declared one."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from migrations import downgrade, upgrade
from scheduler.models import metadata

pytestmark = pytest.mark.postgres


def differences(engine: sqlalchemy.Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, metadata)


def tables(engine: sqlalchemy.Engine) -> set[str]:
    return set(sqlalchemy.inspect(engine).get_table_names()) - {"alembic_version"}


def test_up_down_up_matches_the_models(db: sqlalchemy.Engine):
    assert differences(db) == []
    downgrade(db, "base")
    assert tables(db) == set()
    upgrade(db)
    assert tables(db) == {"jobs", "invocations", "job_changes"}
    assert differences(db) == []
