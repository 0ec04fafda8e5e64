"""The bodies of ``cronchain serve`` and ``cronchain health`` (``scheduler.cli.main`` wires
their arguments).

``serve`` runs the web app on waitress: a pure-Python, multi-threaded WSGI server meant
for production, with nothing to compile. It refuses a non-loopback address without
credentials, since the page will offer controls: whoever reaches the port could use
them.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from cronchain.scheduler.errors import ConfigError, SpecError
from cronchain.scheduler.settings import Settings

if TYPE_CHECKING:
    from celery import Celery
    from sqlalchemy import Engine

    from cronchain.scheduler.api import Scheduler

# waitress's threads: each request holds one for its few database queries, a /healthz
# for up to about two seconds (scheduler.web.health).
THREADS = 8


def serve(host: str, port: int, basic_auth: str | None) -> int:
    """Serve until stopped (SIGINT or SIGTERM). ``basic_auth`` (USER:PASSWORD), or
    ``CRONCHAIN_WEB_BASIC_AUTH``, protects every page but /metrics and /healthz."""
    import waitress

    from cronchain.scheduler.web.app import create_app

    settings = _with_credentials(Settings.from_env(), basic_auth)
    if settings.web_basic_auth is None and not is_loopback(host):
        raise SpecError(
            "--host",
            f"{host} is not a loopback address: give credentials (--basic-auth USER:PASSWORD"
            " or CRONCHAIN_WEB_BASIC_AUTH) to serve beyond this machine",
        )
    from cronchain.scheduler.web.health import WorkerWatch

    db, celery = _connections(settings)
    watch = WorkerWatch(celery, settings).start()
    app = create_app(db, celery, settings, _scheduler(db, celery, settings), watch=watch)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    auth = "basic auth on pages" if settings.web_basic_auth else "no credentials (read-only)"
    print(f"cronchain serve: http://{host}:{port}/ ({auth})", flush=True)
    waitress.serve(app, host=host, port=port, threads=THREADS, ident="cronchain")
    return 0


def health(as_json: bool, only: Sequence[str] = ()) -> int:
    """Every check once (or those named in ``only``): exit status 0 when all pass, 1
    when one fails."""
    from cronchain.scheduler.web.health import Health, check_health

    settings = Settings.from_env()
    db, celery = _connections(settings)
    result = check_health(db, celery, settings)
    if only:
        result = Health(tuple(c for c in result.checks if c.name in only))
    if as_json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        for check in result.checks:
            print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name:<12}  {check.detail}")
        if not result.ok:
            print(f"cronchain: unhealthy: {', '.join(result.failed)}", file=sys.stderr)
    return 0 if result.ok else 1


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (``localhost`` resolved,
    as the server will resolve it). An empty host, or ``0.0.0.0``, is every address."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a[4][0]).is_loopback for a in found)


def _with_credentials(settings: Settings, basic_auth: str | None) -> Settings:
    """The flag wins over the variable, and is checked alike."""
    if basic_auth is None:
        return settings
    try:
        checked = Settings.from_env({"CRONCHAIN_WEB_BASIC_AUTH": basic_auth}).web_basic_auth
    except ConfigError as err:
        raise SpecError("--basic-auth", err.reason) from None
    return replace(settings, web_basic_auth=checked)


def _scheduler(db: Engine, celery: Celery, settings: Settings) -> Scheduler:
    """The ``Scheduler`` the page's controls go through: the CLI's, wired as
    ``Runtime`` wires it, on the app's database engine and Celery app. Its sends give up
    on a silent broker quickly (the change is committed; the watchdog sends it)."""
    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.workers.port import CeleryPort
    from cronchain.scheduler.workers.runtime import engine_of

    port = CeleryPort(celery, settings.queue, settings.work_queue)
    return Scheduler(engine_of(db, port, settings))


def _connections(settings: Settings) -> tuple[Engine, Celery]:
    """A database engine and a Celery app that gives up on a silent broker quickly."""
    from cronchain.scheduler.storage.db import make_engine
    from cronchain.scheduler.workers.runtime import sending_app

    try:
        db = make_engine(settings.database_url)
    except SpecError as err:
        raise ConfigError("CRONCHAIN_DATABASE_URL", err.reason) from None
    return db, sending_app()
