"""The WSGI app of ``cronchain serve``: ``/metrics``, ``/healthz`` and the jobs page.

Flask, because it is sync like cronchain's SQLAlchemy engine (no bridge between an event
loop and blocking database calls), has Jinja2 for server-rendered pages with no build
step, and is kept by the Pallets project; waitress serves it (``scheduler.web.serve``).
The app keeps no state but a database engine and a Celery app, so any number of serve
processes answer alike.

``/metrics`` and ``/healthz`` carry no job specs and need no credentials (Prometheus and
a load balancer ask them). With credentials set, every other path asks for HTTP basic
auth, compared in constant time.
"""

from __future__ import annotations

import hmac

from celery import Celery
from flask import Flask, Response, jsonify, render_template, request
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import Engine

from scheduler.settings import Settings
from scheduler.storage import observed
from scheduler.web.health import check_health
from scheduler.web.metrics import DatabaseCollector, render

OPEN_PATHS = frozenset({"/metrics", "/healthz"})
PAGE_JOBS = 1000  # jobs the page lists at most, by project and name


def create_app(db: Engine, celery: Celery, settings: Settings) -> Flask:
    """The app, reading ``db`` and asking ``celery``'s broker; credentials, if any, are
    ``settings.web_basic_auth`` (USER:PASSWORD)."""
    app = Flask("scheduler.web")
    metrics = DatabaseCollector(db, settings)
    credentials = settings.web_basic_auth

    @app.before_request
    def require_credentials() -> Response | None:
        if credentials is None or request.path in OPEN_PATHS:
            return None
        if _allowed(credentials):
            return None
        return Response(
            "credentials required\n",
            401,
            {"WWW-Authenticate": 'Basic realm="cronchain", charset="UTF-8"'},
            mimetype="text/plain",
        )

    @app.get("/metrics")
    def scrape() -> Response:
        try:
            body = render(metrics)
        except Exception as err:  # the database is away: a failed scrape, said why
            return Response(f"cronchain: metrics unavailable: {err}\n", 503, mimetype="text/plain")
        return Response(body, 200, {"Content-Type": CONTENT_TYPE_LATEST})

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        health = check_health(db, celery, settings)
        return jsonify(health.as_json()), 200 if health.ok else 503

    @app.get("/")
    def jobs_page() -> str:
        with db.connect() as conn:
            jobs = observed.job_gauges(conn, limit=PAGE_JOBS)
        return render_template("jobs.html", jobs=jobs, most=PAGE_JOBS)

    return app


def _allowed(credentials: str) -> bool:
    """Whether the request's basic auth is ``credentials``: user and password both
    compared, each in constant time, whatever the first comparison found."""
    given = request.authorization
    if given is None or given.type != "basic":
        return False
    user, _, password = credentials.partition(":")
    same_user = hmac.compare_digest((given.username or "").encode(), user.encode())
    same_password = hmac.compare_digest((given.password or "").encode(), password.encode())
    return same_user and same_password
