"""The web page for tests: Flask's test client on a test's engine and clock."""

from __future__ import annotations

import base64
from pathlib import Path

from celery import Celery
from flask.testing import FlaskClient

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.web.app import create_app
from tests.support.engine import Clock
from tests.support.services import free_port

CREDENTIALS = "admin:s3cret"
AUTH = {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()}
SAME_SITE = {"Origin": "http://localhost"}  # the test client's host


def client(engine: Engine, clock: Clock, credentials: str | None = None) -> FlaskClient:
    """The page's test client; ``credentials`` (``user:password``) are the basic auth the
    page asks for, None for none."""
    settings = Settings(
        database_url=engine.db.url.render_as_string(hide_password=False),
        broker_url=f"redis://127.0.0.1:{free_port()}/0",
        home=Path("."),
        watchdog_interval=30.0,
        web_basic_auth=credentials,
    )
    app = create_app(engine.db, Celery("web-test"), settings, Scheduler(engine), now=clock)
    return app.test_client()
