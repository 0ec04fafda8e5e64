"""A user's Celery app, loaded as ``celery -A`` and ``celery beat`` load it, and what
beat would send for one of its tasks.

``import-beat`` reads the app's beat schedule, and ``apply --app`` (or beat's reconcile
of ``CRONCHAIN_APPS``) the jobs its tasks declare with ``@periodic``
(:mod:`scheduler.declare.periodic`). Both need the app configured as beat has it: the handlers of
``on_after_configure``/``on_after_finalize`` run (``add_periodic_task``), the modules of
``imports``/``include`` imported. The user's code runs in a process of its own
(:mod:`scheduler.declare.app_process`), never in cronchain's: its handlers must not stay connected
to cronchain's worker, and an edited module must be read afresh.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from celery import Celery
from celery.app.utils import find_app
from kombu import Queue

from cronchain.scheduler.errors import CronchainError, SpecError
from cronchain.scheduler.timing.schedules import parse_zone


class NotFaithful(Exception):
    """What beat would send cannot be sent the same way by cronchain; the text says why."""


def load_app(ref: str, field: str = "app") -> Celery:
    """The app named by ``module:attribute`` (or a module holding one, as ``celery -A``
    finds it), configured and finalized, with the current directory importable as for
    ``celery -A``. A name that does not import, or a module that fails as it is
    imported, is a :class:`SpecError` naming it."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
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
        why = " ".join(why.split())  # one line
        raise SpecError(field, f"cannot load the Celery app {ref!r}: {why}") from None
    return app


def app_zone(app: Celery) -> tuple[str, str | None]:
    """The IANA name of the zone the app's crontabs are read in, and a note when it is
    this machine's zone rather than one the app names (beat would use its own host's)."""
    zone = app.timezone
    name = getattr(zone, "key", None) or str(zone)
    try:
        parse_zone(name)
    except SpecError:
        raise SpecError(
            "timezone", f"the app's zone {name!r} has no IANA name: set app.conf.timezone"
        ) from None
    note = None
    if not app.conf.timezone and not app.conf.enable_utc:
        note = f"the app sets no timezone and enable_utc is off: this machine's zone, {name}"
    return name, note


def send_options(
    app: Celery, task: str, args: Any = (), kwargs: Any = None, options: Any = None
) -> dict[str, Any]:
    """``queue``, ``priority`` and ``expires`` as beat would send ``task`` with the
    entry's ``options``: the task's own options beneath them (``apply_async``), then the
    app's ``task_routes``, else its default queue. A route that names an exchange or a
    routing key of its own is :class:`NotFaithful`: cronchain sends to the queue's name."""
    given = dict(options or {})
    own = app.tasks.get(task)
    merged = {**(own._get_exec_options() if own is not None else {}), **given}
    routed = app.amqp.router.route(merged, task, args, kwargs or {}, task_type=own)
    queue = routed.get("queue")
    name = queue.name if isinstance(queue, Queue) else queue
    exchange = routed.get("exchange") or getattr(getattr(queue, "exchange", None), "name", None)
    exchange = getattr(exchange, "name", exchange)  # an Exchange, or its name
    routing_key = routed.get("routing_key") or getattr(queue, "routing_key", None)
    if exchange not in (None, "", name) or routing_key not in (None, "", name):
        where = f"queue {name!r}" if name else "no queue"
        raise NotFaithful(
            f"sent to {where} through exchange {exchange!r} and routing key {routing_key!r};"
            " cronchain sends to a queue by its name"
        )
    if not isinstance(name, str) or not name:
        raise NotFaithful(f"queue {queue!r} is not a queue name")
    out: dict[str, Any] = {"queue": name}
    for key in ("priority", "expires"):
        if routed.get(key) is not None:
            out[key] = routed[key]
    return out
