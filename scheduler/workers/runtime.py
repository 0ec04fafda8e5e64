"""Wiring: settings -> database, Celery port, invokers -> engine. The one place that
turns the environment into live objects, for workers and for the CLI alike."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from celery import Celery

from scheduler.engine import Engine
from scheduler.invokers import default_invokers
from scheduler.settings import Settings
from scheduler.storage.db import make_engine
from scheduler.workers.port import CeleryPort


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    engine: Engine

    @classmethod
    def current(cls, app: Celery) -> Runtime:
        """One runtime per worker process, made after the fork (connections do not
        survive it), and one only for all the threads of a work-path worker."""
        global _current
        with _making:
            if _current is None or _current[0] != os.getpid():
                _current = (os.getpid(), cls.from_env(app))
            return _current[1]

    @classmethod
    def from_env(cls, app: Celery | None = None) -> Runtime:
        settings = Settings.from_env()
        if app is None:
            app = Celery("cronchain")
            app.config_from_object("celeryconfig")
        port = CeleryPort(app, settings.queue, settings.work_queue)
        engine = Engine(
            make_engine(settings.database_url),
            port,
            default_invokers(settings.http_allow),
            grace=settings.watchdog_grace,
            batch=settings.tick_batch,
            slack=settings.tick_slack,
        )
        return cls(settings, engine)


_current: tuple[int, Runtime] | None = None
_making = threading.Lock()
