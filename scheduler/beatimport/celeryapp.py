"""A user's Celery app, loaded as ``celery -A`` and ``celery beat`` load it.

``import-beat`` reads the app's beat schedule, and ``apply --app`` the jobs its tasks
declare with ``@periodic`` (:mod:`scheduler.declared`). Both need the app configured as
beat would have it: ``add_periodic_task`` calls made in ``on_after_configure`` or
``on_after_finalize`` handlers, and the modules of ``imports``/``include`` imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import celery
from celery import Celery
from celery.app.utils import find_app
from celery.schedules import maybe_schedule

from scheduler.beatimport.entries import BeatEntry
from scheduler.errors import CronchainError, SpecError
from scheduler.timing.schedules import parse_zone


def load_app(ref: str, field: str = "app") -> Celery:
    """The app named by ``module:attribute`` (or a module holding one, as ``celery -A``
    finds it), configured and finalized. The current directory is importable, as it is
    for ``celery -A``. A name that does not import, or a module that fails as it is
    imported, is a :class:`SpecError` naming it. The app that was current stays
    current: a worker that loads a user's app goes on being cronchain's."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    previous = celery.current_app._get_current_object()
    try:
        app = find_app(ref)
        if not isinstance(app, Celery):
            raise SpecError(field, f"{ref!r} is a {type(app).__name__}, not a Celery app")
        app.loader.import_default_modules()  # imports, include and autodiscovery, as beat
        app.finalize(auto=True)
        app.conf  # noqa: B018 -- reading it runs on_configure and on_after_configure
    except CronchainError:
        raise
    except Exception as err:  # the user's module: an import, a syntax error, its own code
        why = str(err) if isinstance(err, ImportError) else f"{type(err).__name__}: {err}"
        raise SpecError(field, f"cannot load the Celery app {ref!r}: {why}") from None
    finally:
        previous.set_current()
    return app


def default_queue(app: Celery, task: str, args: Any = (), kwargs: Any = None) -> str:
    """The queue ``app.send_task(task)`` would use without a ``queue`` option: the app's
    ``task_routes``, else its default queue."""
    route = app.amqp.router.route({}, task, args, kwargs or {})
    queue = route.get("queue")
    name = getattr(queue, "name", queue)
    return str(name or app.conf.task_default_queue)


def app_zone(app: Celery) -> str:
    """The IANA name of the zone the app's crontabs are read in."""
    zone = app.timezone
    name = getattr(zone, "key", None) or str(zone)
    try:
        parse_zone(name)
    except SpecError:
        raise SpecError(
            "timezone", f"the app's zone {name!r} has no IANA name: set app.conf.timezone"
        ) from None
    return name


def beat_entries(app: Celery) -> tuple[list[BeatEntry], list[tuple[str, str]]]:
    """The app's beat schedule as beat would build it, and the entries that are not
    entries at all (no task), each with the reason."""
    zone = app_zone(app)
    entries, broken = [], []
    for name, fields in (app.conf.beat_schedule or {}).items():
        if not isinstance(fields, dict) or not isinstance(fields.get("task"), str):
            broken.append((str(name), "names no task"))
            continue
        entries.append(
            BeatEntry(
                name=str(name),
                task=fields["task"],
                schedule=maybe_schedule(fields.get("schedule"), fields.get("relative", False)),
                zone=zone,
                args=fields.get("args") or (),
                kwargs=fields.get("kwargs"),
                options=fields.get("options") or {},
            )
        )
    return entries, broken
