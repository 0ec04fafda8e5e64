"""Wiring: settings -> database, Celery port, invokers -> engine. The one place that
turns the environment into live objects, for workers and for the CLI alike."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from scheduler.db import make_engine
from scheduler.engine import Engine
from scheduler.invokers import default_invokers
from scheduler.messages import CeleryPort
from scheduler.settings import Settings


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    engine: Engine

    @classmethod
    def from_env(cls, app: Celery | None = None) -> Runtime:
        settings = Settings.from_env()
        if app is None:
            app = Celery("cronchain")
            app.config_from_object("celeryconfig")
        port = CeleryPort(app, settings.queue)
        engine = Engine(
            make_engine(settings.database_url),
            port,
            default_invokers(port),
            grace=settings.watchdog_grace,
        )
        return cls(settings, engine)
