"""The engine's sessions are in UTC, whatever the server's zone: the driver then gives
each time as the engine keeps it, with nothing to convert (``storage/db.py``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy

from cronchain.scheduler.storage.db import make_engine
from tests.support import services

pytestmark = pytest.mark.postgres


def test_a_session_is_in_utc_whatever_the_servers_zone(pg_admin: sqlalchemy.Engine) -> None:
    name = services.create_database(pg_admin)
    try:
        with pg_admin.connect() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {name} SET timezone TO 'America/New_York'")
        engine = make_engine(services.database_url(name))
        try:
            with engine.connect() as conn:
                zone, at = conn.exec_driver_sql(
                    "SELECT current_setting('TimeZone'), timestamptz '2026-03-08 07:30:00+00'"
                ).one()
        finally:
            engine.dispose()
    finally:
        services.drop_database(pg_admin, name)
    assert zone == "UTC"
    assert at == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert at.tzinfo is UTC  # as the driver made it: no conversion left to do
