"""The worker side of the ``celery`` kind: claim, heartbeat, report, without any change
to the user's task.

cronchain sends a job's task with a ``cronchain`` header naming the invocation, the
attempt (its epoch) and the job. On the worker that runs it:

- before the task body runs, the attempt is claimed in the database. Only the current
  attempt, and only one delivery of it, can be claimed: a redelivered message (an
  ``acks_late`` redelivery, a replay) or one from an older attempt is ignored, so it can
  never start a second concurrent run. Nor can a task of a deleted job claim another
  job's run: the claim, the heartbeats and the outcome are recorded only on a run of
  the job the header names;
- while it runs, a thread renews the lease at a third of its length; a task may also
  call :func:`heartbeat` to report progress (and learn that it should stop);
- when it ends, its success or failure (with the exception text) finishes the attempt.

A ``celery`` gate's task (``scheduler.workflows.gates``) comes with a ``cronchain_gate`` header
instead: it runs as it is, and what it returned is recorded as the gate's answer.

cronchain's own Celery app installs this through ``celeryconfig``. A worker built on
another Celery app calls :func:`install` on it, before its tasks are registered.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import celery
from celery.exceptions import Ignore
from celery.signals import task_postrun

from cronchain.scheduler import outside
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.invokers import Outcome, filed_from
from cronchain.scheduler.invokers.celery import HEADER
from cronchain.scheduler.workers import gatecheck
from cronchain.scheduler.workers.gatecheck import HEADER as GATE
from cronchain.scheduler.workers.runtime import Runtime
from cronchain.scheduler.workflows import gates
from cronchain.statemachine import InvocationStatus, Reason

log = logging.getLogger("cronchain.worker")
# The lease a delivery claimed is kept on that delivery's request, not by task id: every
# copy of an attempt has the same task id, and a copy refused while another runs (a
# resend, on a thread of the same worker) must not touch the claimed copy's lease.
LEASE = "cronchain_lease"


def _fence(before_start: Any) -> Any:
    """Wraps ``Task.before_start`` of every task (a Celery task annotation)."""

    def before_start_fenced(self: celery.Task, task_id: str, args: Any, kwargs: Any) -> Any:
        header = getattr(self.request, HEADER, None)
        if header is not None and not _claim(self, task_id, header):
            raise Ignore()
        return before_start(self, task_id, args, kwargs)

    return before_start_fenced


ANNOTATIONS = {"*": {"@before_start": _fence}}


def install(app: celery.Celery) -> None:
    """Make ``app``'s workers claim, heartbeat and report cronchain's runs.

    An app not configured yet is annotated as its configuration loads, not now: reading
    ``app.conf`` here would load it early and send ``on_after_configure`` before the
    module connects its handlers, losing their ``add_periodic_task`` entries."""
    if app.configured:
        _annotate(app)
    else:
        app.on_after_configure.connect(_annotate_configured, sender=app, weak=False)


def _annotate_configured(sender: celery.Celery, **_: Any) -> None:
    _annotate(sender)


def _annotate(app: celery.Celery) -> None:
    existing = app.conf.task_annotations
    rest = [] if existing is None else existing if isinstance(existing, list) else [existing]
    if ANNOTATIONS not in rest:
        app.conf.task_annotations = [ANNOTATIONS, *rest]


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _claim(task: celery.Task, task_id: str, header: Any) -> bool:
    fields = header if isinstance(header, dict) else {}
    invocation_id, attempt = fields.get("invocation"), fields.get("attempt")
    job_id = fields.get("job")  # absent from older headers: the ids alone
    filed = fields.get("filed")  # absent from older headers: found by id alone
    if (
        not _ints(invocation_id, attempt)
        or not all(v is None or _ints(v) for v in (job_id, filed))
        or (filed is not None and filed_from(filed) is None)  # a place no date has
    ):
        log.error("task %r has a malformed cronchain header %r: not run", task_id, header)
        return False
    engine = Runtime.current(task.app).engine
    worker = f"{task.request.hostname or 'worker'}:{os.getpid()}"
    call = engine.attempts.claim(
        invocation_id, attempt, worker, job_id=job_id, filed_at=filed_from(filed)
    )
    if call is None:
        log.warning(
            "invocation %s attempt %s (job %s) is not current or was claimed already, or"
            " is not that job's: task %r not run",
            invocation_id,
            attempt,
            job_id,
            task_id,
        )
        return False
    lease = Lease(invocation_id, attempt, call.lease, job_id=call.job_id, filed_at=call.filed_at)
    setattr(task.request, LEASE, engine.leases.hold(lease))
    return True


@task_postrun.connect
def _report(
    task_id: str, task: celery.Task, retval: Any = None, state: str | None = None, **_: Any
) -> None:
    gate = getattr(task.request, GATE, None)
    if gate is not None:
        _answer_gate(task, gate, retval, state)
    lease = getattr(task.request, LEASE, None)
    if lease is None:  # not a cronchain run, or a copy that claimed nothing
        return
    setattr(task.request, LEASE, None)
    if state == "SUCCESS":
        outcome = Outcome(InvocationStatus.SUCCEEDED)
    elif state == "FAILURE":  # what it raised, whatever its text holds (scheduler.outside)
        outcome = Outcome.failed(outside.described(retval), Reason.ERROR)
    else:  # RETRY: Celery's own retries would run outside the attempt; the job's apply
        outcome = Outcome.failed(f"the task ended as {state}; use the job's retries", Reason.ERROR)
    # The lease goes with the outcome, recorded or not (then it lapses: the watchdog's).
    Runtime.current(task.app).engine.runs.report(lease, outcome)


def _answer_gate(task: celery.Task, header: Any, retval: Any, state: str | None) -> None:
    """A ``celery`` gate's task ended: it says yes by returning True, nothing else."""
    fields = header if isinstance(header, dict) else {}
    invocation_id, name, number, job_id = (
        fields.get(k) for k in ("invocation", "gate", "check", "job")
    )
    if not (_ints(invocation_id, number, job_id) and isinstance(name, str)):
        log.error("task %s has a malformed %s header %r: not recorded", task.name, GATE, header)
        return
    if state == "SUCCESS":
        yes, said = retval is True, f"returned {outside.shown(retval, gates.SAID)}"
    else:
        yes, said = False, f"{state}: {outside.described(retval)}"
    engine = Runtime.current(task.app).engine
    try:
        gatecheck.record(engine, invocation_id, name, number, job_id, yes, said)
    except Exception:  # the task's own outcome and the worker must not suffer for it
        log.exception("gate %r of invocation %s: answer not recorded", name, invocation_id)


def heartbeat(note: str | None = None) -> bool:
    """Renew the current task's lease now and add ``note`` to its debug log. Returns
    False when the attempt is no longer current (aborted, timed out, retried): the task
    should stop, its result will not be recorded. Outside a cronchain run: True."""
    task = celery.current_task
    lease = getattr(task.request, LEASE, None) if task else None
    if task is None or lease is None:
        return True
    return Runtime.current(task.app).engine.leases.renew(lease, note)
