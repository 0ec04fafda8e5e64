"""``@periodic``: a Celery task that declares its own cronchain job.

    @periodic("0 2 * * *", timezone="Europe/Berlin", project="etl", retries={"max_attempts": 3})
    @app.task(name="etl.nightly")
    def nightly(): ...

The decorator goes above ``@app.task``, whose result is a promise until the app is
finalized: it only records the declaration and returns the task unchanged. The job is
built when an app is loaded (``cronchain apply --app MODULE:APP``, or the apps of
``CRONCHAIN_APPS`` on beat's reconcile interval), from the task's name and the queue
``send_task`` would route it to, and applied project by project exactly as a job file
is: same revision, and jobs of the project no task declares any more are disabled.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import celery
from celery import Celery, Task
from celery.local import PromiseProxy, Proxy

from cronchain.scheduler.declare.celery_app import NotFaithful, send_options
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.spec.model import NAME

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Declaration:
    """One ``@periodic`` as written. ``task`` is kept as the decorator got it (often an
    unevaluated promise): it is resolved only for an app that is finalized."""

    task: Any
    where: str  # "@periodic at path.py:12", for messages
    schedule: str
    name: str | None
    project: str | None
    timezone: str
    queue: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int | None
    expires: Any
    controls: dict[str, Any]
    days: str | None = None

    def spec(self, app: Celery, task: Task) -> JobSpec:
        """The job this declaration makes for ``task`` of ``app``: sent as beat would
        send the task, its own options and the app's routes beneath what was given."""
        name = _job_name(task.name, self.where) if self.name is None else self.name
        project = _project(app, self.where) if self.project is None else self.project
        try:
            sent = send_options(app, task.name, self.args, self.kwargs, self.given())
            return JobSpec(
                project,
                name,
                self.schedule,
                self.timezone,
                "celery",
                self.options(task.name, sent),
                self.controls,
                days=self.days,
            )
        except NotFaithful as why:
            raise SpecError("queue", str(why), where=f"{self.where}: job {name!r}") from None
        except SpecError as err:
            raise err.located(f"{self.where}: job {name!r}") from None

    def given(self) -> dict[str, Any]:
        """The sending options written in the decorator."""
        given = {"queue": self.queue, "priority": self.priority, "expires": self.expires}
        return {k: v for k, v in given.items() if v is not None}

    def options(self, task: str, sent: Mapping[str, Any]) -> dict[str, Any]:
        """The ``celery`` options: the task, its arguments, and how it is sent."""
        return {"task": task, "args": self.args, "kwargs": self.kwargs, **sent}


_DECLARED: list[Declaration] = []


def periodic(
    schedule: str,
    *,
    name: str | None = None,
    project: str | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    priority: int | None = None,
    expires: float | str | None = None,
    days: str | None = None,
    **controls: Any,
) -> Callable[[T], T]:
    """Declare a ``celery`` job that sends the decorated task on ``schedule``.

    ``name`` defaults to the task's name and ``project`` to the app's ``main`` name;
    ``queue`` to the queue ``send_task`` would route the task to; ``priority`` and
    ``expires`` are Celery's, as a job file's ``celery`` takes them; ``days="both"`` makes
    a cron schedule's two day fields both match, as Celery's ``crontab``; ``controls`` are a
    job file's (``lease``, ``timeout``, ``retries``, ``overlap``, ``misfire``, ...).
    Everything but the task is checked here, so a bad value fails the import that
    declares it, with a :class:`SpecError` naming the field. Give each of several
    ``@periodic`` on one task its own ``name``. The worker running the task still needs
    ``scheduler.install(app)``."""
    caller = sys._getframe(1)  # the line of the decorator, for messages
    where = f"@periodic at {Path(caller.f_code.co_filename).name}:{caller.f_lineno}"
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise SpecError("args", "must be a list or a tuple", where=where)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise SpecError("kwargs", "must be a mapping", where=where)
    declaration = Declaration(
        task=None,
        where=where,
        schedule=schedule,
        name=name,
        project=project,
        timezone=timezone,
        queue=queue,
        args=list(args),
        kwargs=dict(kwargs or {}),
        priority=priority,
        expires=expires,
        controls=controls,
        days=days,
    )
    _check(declaration)

    def declare(task: T) -> T:
        if not issubclass(type(task), Proxy) and not isinstance(task, Task):
            # type(), not isinstance, for a proxy: isinstance would evaluate it.
            why = f"decorates a Celery task: put it above @app.task, not on a {type(task).__name__}"
            raise SpecError("periodic", why, where=where)
        for other in _DECLARED:
            if other.task is task and (other.name, other.project) == (name, project):
                why = "this task has another @periodic of that name: give each a name="
                raise SpecError("name", why, where=where)
        _DECLARED.append(replace(declaration, task=task))
        return task

    return declare


def _check(declaration: Declaration) -> None:
    """Build the job with stand-ins for what only the app knows (the task's name and
    route, the default project), so that every value the user wrote is checked at
    import."""
    try:
        JobSpec(
            "project" if declaration.project is None else declaration.project,
            "task" if declaration.name is None else declaration.name,
            declaration.schedule,
            declaration.timezone,
            "celery",
            declaration.options("task", {"queue": "celery"} | declaration.given()),
            declaration.controls,
            days=declaration.days,
        )
    except SpecError as err:
        raise err.located(declaration.where) from None


def _job_name(task_name: str, where: str) -> str:
    if not NAME.fullmatch(task_name):
        why = (
            f"task name {task_name!r} is not a job name (1-100 letters, digits, '.', '_',"
            " '-'): pass name="
        )
        raise SpecError("name", why, where=where)
    return task_name


def _project(app: Celery, where: str) -> str:
    if not isinstance(app.main, str) or not NAME.fullmatch(app.main):
        why = f"the app's name {app.main!r} is not a project name: pass project="
        raise SpecError("project", why, where=where)
    return app.main


def _task_of(declared: Any, app: Celery) -> Task | None:
    """The task a declaration names, if it is one of ``app``'s. A promise of ``app``
    was evaluated when ``app`` was finalized; one still pending belongs to another app
    and is left so. A shared task (a plain proxy) resolves in the current app."""
    if issubclass(type(declared), PromiseProxy):
        if not declared.__evaluated__():
            return None
        task = declared._get_current_object()
    elif issubclass(type(declared), Proxy):
        previous = celery.current_app._get_current_object()
        app.set_current()
        try:
            task = declared._get_current_object()
        except KeyError:  # not a task of this app
            return None
        finally:
            previous.set_current()
    else:
        task = declared
    return task if app.tasks.get(task.name) is task else None


def declared_jobs(app: Celery) -> dict[str, list[JobSpec]]:
    """The jobs ``app``'s tasks declare, by project, both sorted by name (the order of
    imports and of stacked decorators says nothing). ``app`` must be finalized
    (``celeryapps.load_app`` does it). Two jobs of one name in a project, or a trigger
    naming no job of the project, are refused as a job file refuses them."""
    projects: dict[str, list[JobSpec]] = {}
    places: dict[str, str] = {}  # job id -> the @periodic that declares it
    for declaration in list(_DECLARED):
        task = _task_of(declaration.task, app)
        if task is None:
            continue
        spec = declaration.spec(app, task)
        if spec.id in places:
            why = f"duplicate name: {places[spec.id]} declares {spec.id!r} too"
            raise SpecError("name", why, where=declaration.where)
        places[spec.id] = declaration.where
        projects.setdefault(spec.project, []).append(spec)
    for specs in projects.values():
        names = {spec.name for spec in specs}
        for spec in specs:
            for target in spec.controls.get("triggers", ()):
                if "/" not in target and target not in names:
                    why = f"no job named {target!r} in project {spec.project!r} (use project/name)"
                    raise SpecError("triggers", why, where=places[spec.id])
    return {p: sorted(specs, key=lambda s: s.name) for p, specs in sorted(projects.items())}
