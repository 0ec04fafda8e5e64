"""Migrations go up, down and up again, and the migrated schema is the declared one."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from migrations import downgrade, upgrade
from scheduler.storage.models import metadata

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
    assert tables(db) == {"jobs", "invocations", "job_changes", "revokes"}
    assert differences(db) == []


def test_0003_records_what_is_known_of_existing_jobs(db: sqlalchemy.Engine):
    """Jobs from before 0003 get change records, so that explain does not call an enabled
    job disabled for want of history."""
    downgrade(db, "0002")
    with db.begin() as conn:
        for name, enabled, paused in (
            ("on", True, False),
            ("off", False, False),
            ("p", True, True),
        ):
            state = "SUSPENDED" if paused else ("SCHEDULED" if enabled else "DISABLED")
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision,"
                    " enabled, paused, pause_reason, state, generation, invocation_running,"
                    " overruns, active, buffered, created_at, updated_at) VALUES ('m', :name,"
                    " 'noop', 'every 10s', 'UTC', '{}', 'r1', :enabled, :paused, :reason, :state,"
                    " 0, false, 0, 0, 0, '2026-01-01 00:00:00+00', '2026-01-02 00:00:00+00')"
                ),
                dict(
                    name=name,
                    enabled=enabled,
                    paused=paused,
                    reason="ops" if paused else None,
                    state=state,
                ),
            )
    upgrade(db)
    with db.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT j.name, c.change, c.reason FROM job_changes c JOIN jobs j"
                " ON j.id = c.job_id ORDER BY j.name, c.id"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("off", "created", None),
        ("on", "created", None),
        ("on", "enabled", None),
        ("p", "created", None),
        ("p", "enabled", None),
        ("p", "paused", "ops"),
    ]
