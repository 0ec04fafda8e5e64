"""Invokers: how a run's call is made, one per kind.

Every attempt is sent as a message after the RUNNING record that describes it commits,
and claimed by the worker that takes it: ``cronchain.run`` on the work path for the
``noop`` and ``http`` kinds (:mod:`scheduler.workers.work`), which calls their invoker in
one of its threads; the job's own task for the ``celery`` kind (:mod:`.celery`), claimed
by the hooks of the user's worker (:mod:`scheduler.workers.hooks`).
"""

from __future__ import annotations

from cronchain.scheduler.invokers.call import (
    SUCCEEDED,
    Call,
    Invoker,
    Outcome,
    celery_task_id,
    filed_from,
)
from cronchain.scheduler.invokers.http import HttpInvoker
from cronchain.scheduler.invokers.netguard import parse_allow
from cronchain.scheduler.invokers.noop import NoopInvoker

__all__ = [
    "SUCCEEDED",
    "Call",
    "HttpInvoker",
    "Invoker",
    "NoopInvoker",
    "Outcome",
    "celery_task_id",
    "default_invokers",
    "filed_from",
]


def default_invokers(http_allow: str = "") -> dict[str, Invoker]:
    """The kinds the work path runs; ``celery`` runs on the user's own workers."""
    return {"noop": NoopInvoker(), "http": HttpInvoker(parse_allow(http_allow))}
