"""The WSGI app of ``cronchain serve``: ``/metrics``, ``/healthz`` and the pages.

Flask, because it is sync like cronchain's SQLAlchemy engine (no bridge between an event
loop and blocking database calls), has Jinja2 for server-rendered pages with no build
step, and is kept by the Pallets project; waitress serves it (``scheduler.web.serve``).
The app keeps no state but a database engine, a Celery app and the ``Scheduler`` its
controls go through, so any number of serve processes answer alike.

``/metrics``, ``/healthz`` and ``/livez`` carry no job specs and need no credentials
(Prometheus, a load balancer and Kubernetes ask them). With credentials set, every other
path asks for HTTP basic auth, compared in constant time, and whoever passes is the
operator: the pages show the controls (``scheduler.web.actions``). Without credentials
(loopback only) the pages are read-only and a control's POST answers 403.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import datetime

from celery import Celery
from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import Engine

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage.clock import database_clock
from cronchain.scheduler.web import actions, errors, views
from cronchain.scheduler.web.context import WebContext
from cronchain.scheduler.web.health import WorkerWatch, check_health
from cronchain.scheduler.web.metrics import DatabaseCollector, render

OPEN_PATHS = frozenset({"/metrics", "/healthz", "/livez"})


def create_app(
    db: Engine,
    celery: Celery,
    settings: Settings,
    scheduler: Scheduler,
    now: Callable[[], datetime] | None = None,
    watch: WorkerWatch | None = None,
) -> Flask:
    """The app, reading ``db``, asking ``celery``'s broker and acting through
    ``scheduler`` (on the same database); credentials, if any, are
    ``settings.web_basic_auth`` (USER:PASSWORD). ``now``: a test's clock. ``watch``:
    what /healthz reads of the broker and the workers (``cronchain serve`` starts one);
    without it, each request asks them (a second)."""
    app = Flask("cronchain.scheduler.web")
    app.extensions["cronchain"] = WebContext(
        db, scheduler, settings.web_basic_auth, now or database_clock(db), settings.watchdog_grace
    )
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

    @app.after_request
    def page_headers(response: Response) -> Response:
        """No framing (clickjacking of the controls), no sniffing, no caching of pages
        that hold job details, and nothing loaded from elsewhere."""
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
        )
        if request.path not in OPEN_PATHS and not request.path.startswith("/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.get("/metrics")
    def scrape() -> Response:
        try:
            body = render(metrics)
        except Exception as err:  # the database is away: a failed scrape, said why
            return Response(f"cronchain: metrics unavailable: {err}\n", 503, mimetype="text/plain")
        return Response(body, 200, {"Content-Type": CONTENT_TYPE_LATEST})

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        """Readiness: every check, the broker's and the workers' as ``watch`` last saw
        them (their detail says how long ago)."""
        health = check_health(db, celery, settings, watch=watch)
        return jsonify(health.as_json()), 200 if health.ok else 503

    @app.get("/livez")
    def livez() -> Response:
        """Liveness: the process answers. It asks nothing, so that a database or a broker
        that is down makes the pod unready (``/healthz``), never restarted."""
        return jsonify({"ok": True})

    views.register(app)
    actions.register(app)
    errors.register(app)
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
