"""The jobs of a user's apps: ``cronchain apply --app MODULE:APP`` and beat's reconcile
of ``CRONCHAIN_APPS``. Each app's ``@periodic`` jobs (:mod:`scheduler.declare.periodic`) are read
by a process of its own (:mod:`scheduler.declare.app_process`) and applied project by project, as
a job file is."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cronchain.scheduler.declare.app_process import read_app
from cronchain.scheduler.declare.apply import ApplyReport, apply
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import CronchainError, SpecError, TransientError
from cronchain.scheduler.spec.jobspec import JobSpec

log = logging.getLogger(__name__)


def jobs_of_app(ref: str, project: str | None = None) -> dict[str, list[JobSpec]]:
    """The jobs the tasks of the app ``ref`` names (``module:attribute``) declare, of
    ``project`` alone if given, read by a process of its own (:mod:`scheduler.declare.app_process`)
    so that the app's modules are read afresh each time. An app that declares none, or
    none of ``project``, is refused: applying nothing would disable every job of a
    project."""
    answer = read_app("periodic", ref)["projects"]
    declared = {p: [JobSpec(p, **fields) for fields in jobs] for p, jobs in answer.items()}
    if project is not None:
        if project not in declared:
            why = f"no job of app {ref!r} declares project {project!r}"
            raise SpecError("project", f"{why}; applying none would disable all of its jobs")
        return {project: declared[project]}
    if not declared:
        why = "declares no job: are the modules of its @periodic tasks in its imports or include?"
        raise SpecError("app", f"{ref!r} {why}")
    return declared


@dataclass
class AppsReport:
    applied: dict[str, ApplyReport] = field(default_factory=dict)  # "ref: project" -> report
    failed: dict[str, str] = field(default_factory=dict)  # "ref" or "ref: project" -> error


def reconcile_apps(
    engine: Engine, refs: Iterable[str], owners: Mapping[str, str] | None = None
) -> AppsReport:
    """Apply every project the apps ``refs`` declare, each on its own: an app that does
    not load, or a project that does not apply, is reported and left out, and the
    others are still applied. A project belongs to one source: one that ``owners``
    gives to a job file (the file wins), or that an earlier app declares, is refused,
    since two sources of one project would disable each other's jobs on every pass. A
    database outage is not an app's fault: it ends the pass."""
    report = AppsReport()
    owners = dict(owners or {})
    for ref in refs:
        try:
            declared = jobs_of_app(ref)
        except TransientError:
            raise
        except CronchainError as err:
            report.failed[ref] = str(err)
            continue
        except Exception as err:  # the app's own code fails: the other apps still apply
            log.exception("app %s: loading it failed", ref)
            report.failed[ref] = f"{type(err).__name__}: {err}"
            continue
        for project, specs in declared.items():
            key = f"{ref}: {project}"
            try:
                owner = owners.setdefault(project, f"app {ref}")
                if owner != f"app {ref}":
                    why = f"{project!r} is declared by {owner} already; a project has one source"
                    raise SpecError("project", why, where=ref)
                report.applied[key] = apply(engine, project, specs)
            except TransientError:
                raise
            except CronchainError as err:
                report.failed[key] = str(err)
            except Exception as err:  # a bug, but one project's: the others still apply
                log.exception("app %s: applying project %s failed", ref, project)
                report.failed[key] = f"{type(err).__name__}: {err}"
    return report
