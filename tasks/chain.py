"""cronchain's Celery tasks: each one checks its message and calls the engine.

A malformed message (wrong types, unknown ids) is logged and dropped: it must never
crash a worker or touch a row. Database outages raise ``TransientError``, which Celery
retries with backoff; if retries run out, the watchdog repairs the step anyway.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Task, current_app
from celery.concurrency import prefork
from celery.signals import (
    beat_init,
    worker_before_create_process,
    worker_init,
    worker_process_init,
    worker_ready,
)

from cronchain.scheduler.alerts.delivery import deliver as deliver_alert
from cronchain.scheduler.cli.up import STARTED_BY_UP
from cronchain.scheduler.core.attempts import AttemptRef
from cronchain.scheduler.declare.apply import ApplyReport, reconcile_folder
from cronchain.scheduler.declare.apps import reconcile_apps
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Outcome, filed_from
from cronchain.scheduler.maintenance.watchdog import pass_for, waited
from cronchain.scheduler.settings import WATCHDOG_LIFETIME, Settings
from cronchain.scheduler.workers import heap
from cronchain.scheduler.workers.gatecheck import check as check_gate
from cronchain.scheduler.workers.runtime import Runtime
from cronchain.scheduler.workers.work import execute, execute_batch
from cronchain.statemachine import InvocationStatus, Reason
from cronchain.tasks.app import app

log = logging.getLogger("cronchain.tasks")
MAX_BATCH = 10_000  # far above any CRONCHAIN_TICK_BATCH; more is not ours
RETRY = dict(autoretry_for=(TransientError,), retry_backoff=1, retry_backoff_max=30, max_retries=8)
# A run's message is acknowledged as its thread takes it, not when its calls end: a run
# may outlast the broker's patience (RabbitMQ's consumer_timeout closes the channel of a
# consumer that holds a delivery unacknowledged too long, and Celery's worker exits).
# A delivery again would find its attempts claimed and do nothing: the claim, its lease
# and the watchdog, not the message, carry a run to its end. A message lost between its
# acknowledgement and the claim (a worker killed) leaves its attempt unclaimed, and the
# watchdog sends it again once its deadline passes (half a watchdog interval after it
# was sent, checked at the next pass).
RUN = RETRY | dict(acks_late=False)


def runtime() -> Runtime:
    made = Runtime.current(app)
    heap.freeze("runtime")  # once per process: what its tasks need for its life is made
    return made


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


@app.task(name="cronchain.tick_later", **RETRY)
def tick_later(job_id: int, nonce: int) -> None:
    if not _ints(job_id, nonce):
        log.error("malformed tick_later message dropped: %r %r", job_id, nonce)
        return
    runtime().engine.tick(job_id, nonce, start_here=True)


@app.task(name="cronchain.tick_batch", **RETRY)
def tick_batch(ticks: Any) -> None:
    """The ticks of jobs due at the same instant, each checked against its own nonce."""
    if not (
        isinstance(ticks, list)
        and 0 < len(ticks) <= MAX_BATCH
        and all(isinstance(t, list | tuple) and len(t) == 2 and _ints(*t) for t in ticks)
    ):
        log.error("malformed tick_batch message dropped: %.200r", ticks)
        return
    runtime().engine.tick_many([(job_id, nonce) for job_id, nonce in ticks], start_here=True)


@app.task(name="cronchain.start_invocation", **RETRY)
def start_invocation(invocation_id: int, attempt: int | None = None) -> None:
    if not _ints(invocation_id) or not (attempt is None or _ints(attempt)):
        log.error("malformed start_invocation message dropped: %r %r", invocation_id, attempt)
        return
    runtime().engine.attempts.start_invocation(invocation_id, attempt)


@app.task(name="cronchain.run", bind=True, **RUN)
def run(
    self: Task, invocation_id: int, attempt: int, job_id: int | None = None, filed: Any = None
) -> None:
    """The work path: claim an attempt of a noop or http run, make its call, record it.
    ``job_id`` is the run's job, ``filed`` where it is filed (``Call.filed_us``; both
    absent from older messages: the ids alone)."""
    if not _attempt_ref([invocation_id, attempt, job_id, filed]):
        log.error(
            "malformed run message dropped: %r %r %r %r", invocation_id, attempt, job_id, filed
        )
        return
    worker = f"{self.request.hostname or 'worker'}:{os.getpid()}:{threading.get_ident()}"
    execute(runtime().engine, invocation_id, attempt, worker, job_id, filed_from(filed))


@app.task(name="cronchain.run_batch", bind=True, **RUN)
def run_batch(self: Task, attempts: Any) -> None:
    """The work path: attempts begun together, claimed in one transaction. Each is
    ``[invocation, attempt, job, filed]`` (``filed``: where the run is filed,
    ``Call.filed_us``; older messages have ``[invocation, attempt, job]`` or
    ``[invocation, attempt]``)."""
    if not (
        isinstance(attempts, list)
        and 0 < len(attempts) <= MAX_BATCH
        and all(_attempt_ref(a) for a in attempts)
    ):
        log.error("malformed run_batch message dropped: %.200r", attempts)
        return
    worker = f"{self.request.hostname or 'worker'}:{os.getpid()}:{threading.get_ident()}"
    rt = runtime()
    refs: list[AttemptRef] = [
        (a[0], a[1], a[2] if len(a) > 2 else None, filed_from(a[3] if len(a) > 3 else None))
        for a in attempts
    ]
    execute_batch(rt.engine, refs, worker, rt.settings.work_concurrency)


@app.task(name="cronchain.alert", **RETRY)
def alert(alert_id: int) -> None:
    """The work path: deliver an alert to its channels (``scheduler.alerts.delivery``)."""
    if not _ints(alert_id):
        log.error("malformed alert message dropped: %.200r", alert_id)
        return
    deliver_alert(runtime().engine, alert_id)


@app.task(name="cronchain.gate", **RETRY)
def gate(invocation_id: int, name: str, number: int, job_id: int) -> None:
    """The work path: ask a run's gate (``scheduler.workflows.gates``)."""
    if not (_ints(invocation_id, number, job_id) and isinstance(name, str)):
        log.error("malformed gate message dropped: %.200r", (invocation_id, name, number, job_id))
        return
    check_gate(runtime().engine, app, invocation_id, name, number, job_id)


def _attempt_ref(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) in (2, 3, 4)
        and _ints(*value[:2])
        and all(v is None or _ints(v) for v in value[2:])
        and (len(value) < 4 or value[3] is None or filed_from(value[3]) is not None)
    )


@worker_ready.connect
def _freeze_heap(sender: Any, **_: Any) -> None:
    if sender.app is app:  # cronchain's worker's main process: its consumer, once made
        heap.freeze("ready")
        if isinstance(sender.pool, prefork.TaskPool):  # it only holds what others run
            heap.keep_frozen(sender.timer)
        else:  # its tasks run in this process
            _make_runtime()


_ours: list[bool] = []  # this process is the main process of cronchain's worker


@worker_init.connect
def _know_our_worker(sender: Any, **_: Any) -> None:
    # Known from the worker itself: a module it imports (CRONCHAIN_IMPORTS) may make
    # another app current, and a user's worker may import cronchain's tasks.
    if sender.app is app:
        _ours.append(True)


@worker_before_create_process.connect
def _freeze_before_fork(**_: Any) -> None:
    """A prefork worker's main process, about to fork a child: what it has made (the
    modules, the app) is frozen first, so that the child inherits it frozen and its own
    freeze, once its runtime is made, walks only what it made since. Each child's full
    collection of the inherited heap cost a worker's start about 0.3 s of CPU."""
    if _ours:
        heap.freeze("fork")


@worker_process_init.connect
def _make_child_runtime(**_: Any) -> None:
    # A prefork child of cronchain's worker, forked (a spawned child, as on macOS, has
    # a copy of the app: it makes its runtime at its first task), or a solo worker.
    if current_app._get_current_object() is app:
        _make_runtime()


def _make_runtime() -> None:
    """Make the process's runtime, and freeze what it made, before its first task, so
    that the collection does not delay that task. Nothing connects yet. If it cannot
    be made, it is logged and left to the first task, which says why again."""
    try:
        runtime()
    except Exception:
        log.exception("this worker process's runtime could not be made: its tasks will try")


@worker_ready.connect
def _say_what_is_missing(sender: Any, **_: Any) -> None:
    """A worker of the control path alone runs no noop or http run: say so at start,
    rather than leave the runs to wait silently. INFO, not WARNING: in a whole
    deployment the work path is another worker, which this one cannot see; when runs do
    wait with no worker to take them, the watchdog warns as it sends them again."""
    settings = Settings.from_env()  # not the runtime: no database in the main process
    consumed = set(sender.app.amqp.queues.consume_from or ())
    if os.environ.get(STARTED_BY_UP):  # up starts the work path beside this worker
        return
    if settings.queue in consumed and settings.work_queue not in consumed:
        log.info(
            "this worker does not consume %s, where noop and http runs go: they wait until"
            " a worker of the work path takes them (cronchain up starts one; elsewhere run"
            " celery -A cronchain.tasks worker --queues %s --pool threads --concurrency %s)",
            settings.work_queue,
            settings.work_queue,
            settings.work_concurrency,
        )


# Link callbacks of celery runs sent by cronchain before leases (0.1): kept so that
# messages already in flight during an upgrade still finish their invocations.
@app.task(name="cronchain.invocation_succeeded", **RETRY)
def invocation_succeeded(result: Any = None, *, invocation_id: int) -> None:
    if _ints(invocation_id):
        runtime().engine.runs.finish_invocation(invocation_id, Outcome(InvocationStatus.SUCCEEDED))


@app.task(name="cronchain.invocation_failed", **RETRY)
def invocation_failed(task_id: str | None = None, *, invocation_id: int) -> None:
    if _ints(invocation_id):
        outcome = Outcome.failed(f"celery task {task_id} failed", Reason.ERROR)
        runtime().engine.runs.finish_invocation(invocation_id, outcome)


@app.task(name="cronchain.reconcile", **RETRY)
def reconcile() -> dict[str, Any]:
    """Apply the job files of ``CRONCHAIN_JOBS_DIR``, then the jobs that the apps of
    ``CRONCHAIN_APPS`` declare with ``@periodic`` (sent by beat as it starts and on an
    interval). A project a file declares is the file's: an app's declarations of it are
    refused. Each file and each app's project is applied or refused on its own."""
    rt = runtime()
    applied: dict[str, ApplyReport] = {}
    failed: dict[str, str] = {}
    owners: dict[str, str] = {}  # project -> the job file that declares it
    if rt.settings.jobs_dir is not None:
        folder = reconcile_folder(rt.engine, rt.settings.jobs_dir)
        applied |= folder.applied
        failed |= folder.failed
        for name, error in folder.failed.items():
            log.error("job file %s not applied: %s", name, error)
        owners = folder.owners
    if rt.settings.apps:  # keys "module:app: project", or "module:app" if it did not load
        apps = reconcile_apps(rt.engine, rt.settings.apps, owners)
        applied |= apps.applied
        failed |= apps.failed
        for name, error in apps.failed.items():
            log.error("app %s not applied: %s", name, error)
    changed = {
        name: {"created": r.created, "updated": r.updated, "disabled": r.disabled}
        for name, r in applied.items()
        if r.created or r.updated or r.disabled
    }
    if changed:
        log.warning("reconciled: %s", changed)
    return {"applied": len(applied), "changed": changed, "failed": failed}


RECONCILE_ENTRY = "cronchain-reconcile"  # its name in celeryconfig's beat_schedule


@beat_init.connect
def _reconcile_at_start(sender: Any, **_: Any) -> None:
    """Make the reconcile entry due at beat's first tick. Celery first sends an interval
    entry one interval after it is added (or after its last run, kept in beat's schedule
    file), so that files and apps changed while beat was down would wait that long."""
    entry = sender.scheduler.schedule.get(RECONCILE_ENTRY)
    if entry is not None:
        entry.last_run_at = entry.default_now() - entry.schedule.run_every


@app.task(name="cronchain.watchdog", bind=True, **RETRY)
def watchdog(self: Task) -> dict[str, int]:
    rt = runtime()
    # Beat gives each run WATCHDOG_LIFETIME to live (celeryconfig): that tells how long it
    # waited behind the ticks, which were held up as long.
    backlog = waited(self.request.expires, WATCHDOG_LIFETIME, rt.engine.clock())
    report = pass_for(rt.engine, rt.settings.watchdog_interval, backlog)
    if report.repairs:
        log.warning("watchdog repaired %s (it waited %.1f s)", report, backlog.total_seconds())
    return {
        "woken": report.woken,
        "ticks": report.ticks,
        "starts": report.starts,
        "expired": report.expired,
        "resent": report.resent,
        "revokes": report.revokes,
    }
