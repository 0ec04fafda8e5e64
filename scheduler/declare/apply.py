"""``apply``: make a project's jobs in the database match a declared list.

Jobs in the list are created or updated; jobs of the project missing from it are
disabled (their history kept), or with ``prune`` deleted with their history. An
unchanged spec writes nothing at all.

``reconcile_folder`` applies every job file of a folder: beat runs it on an interval
when ``CRONCHAIN_JOBS_DIR`` is set, so the folder is the source of truth.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from cronchain.scheduler import progress
from cronchain.scheduler.core.effects import Message, SendTick, Stepped
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import CronchainError, SpecError, TransientError
from cronchain.scheduler.spec.jobspec import JobFile, JobSpec, load_job_file
from cronchain.scheduler.storage import alert_store, job_store, pool_store, upstream_store
from cronchain.scheduler.storage.job_batch import CHUNK, JobBatch
from cronchain.scheduler.storage.job_store import JobHead
from cronchain.scheduler.storage.rows import JobRow
from cronchain.scheduler.timing.schedules import Schedule
from cronchain.scheduler.workflows import pools, upstream
from cronchain.scheduler.workflows.triggergraph import reachable_cycle
from cronchain.statemachine import (
    Disable,
    Enable,
    Event,
    JobSnapshot,
    JobState,
    Pause,
    Resume,
    ScheduleChanged,
    Step,
    TickLater,
)

log = logging.getLogger(__name__)


@dataclass
class ApplyReport:
    """What an apply did (or, dry, would do) to ``project``'s jobs, by ``project/name``."""

    project: str = ""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def apply(
    engine: Engine,
    project: str,
    specs: list[JobSpec],
    *,
    dry_run: bool = False,
    prune: bool = False,
    channels: dict[str, dict[str, Any]] | None = None,
    pool_sizes: dict[str, int] | None = None,
) -> ApplyReport:
    """Make ``project``'s jobs match ``specs``, in one transaction; then send the ticks.
    With ``channels`` (a job file's ``channels:``), they become the project's alert
    channels in the same transaction, and ``pool_sizes`` (its ``pools:``) the sizes of
    those pools.

    Applies of one project wait for each other (``lock_project``), so that two at the
    same time (two operators, a deploy beside beat's folder reconcile) both succeed: the
    later one finds the jobs as the earlier one left them. The jobs' steps are held in
    memory and written together, a few thousand jobs at a time (``_Steps``), so that
    100,000 jobs take seconds."""
    if any(spec.project != project for spec in specs):
        raise ValueError(f"every job must belong to project {project!r}")
    messages: list[Message] = []
    with collector_paused():
        with engine.transaction() as conn:
            now = engine.clock()
            job_store.lock_project(conn, project)
            heads = job_store.heads_of_project(conn, project)
            _refuse_trigger_cycles(conn, project, specs)
            _refuse_bad_requirements(conn, project, specs)
            _refuse_unknown_pools(conn, specs, pool_sizes or {})
            changes = _Changes.of(project, specs, heads, prune=prune)
            _refuse_required_deletes(conn, project, changes.report.deleted)
            if not dry_run:
                steps = _Steps(engine, conn, now, changes.new)
                locked = job_store.lock_jobs(conn, changes.written)
                _declare_all(steps, project, changes, locked)
                _retire_all(steps, changes, locked, prune=prune)
                messages = steps.write(f"apply {project}: writing")
                messages += upstream.write_requirements(
                    engine, conn, project, specs, changes.written
                )
                if channels is not None:
                    alert_store.replace_channels(conn, project, channels, now)
                if pool_sizes:
                    messages += pools.set_sizes(conn, pool_sizes, now, engine.grace)
        _send(engine, messages, f"apply {project}: sending")
    return changes.report


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Without a pause, Python's cycle collector walks every spec and held row again and
    again while an apply of 100,000 jobs makes their rows: 2.5 s of 10. Reference
    counting still frees all the apply drops; the collector runs again once it is done.
    (``cronchain apply`` pauses it while it reads the file too.)"""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


# A new job's snapshot before its first step, as ``JobBatch.add`` reads it back.
_NEW = JobSnapshot()


class _Steps:
    """An apply's steps of its jobs' machines, held in a ``JobBatch`` and written
    together once ``CHUNK`` jobs are held (``flush``) and at the end. A step that needs
    the database before its save (a waiting run to start, skipped slots to record) is
    fed as ever, once the held writes before it are made. A new job's first step is
    ``first_enable``'s."""

    def __init__(self, engine: Engine, conn: Connection, now: datetime, new: int):
        self.engine, self.conn, self.now = engine, conn, now
        self.batch = JobBatch(now)
        self.ids = iter(job_store.reserve_job_ids(conn, new))
        self.messages: list[Message] = []
        self.doomed: list[int] = []

    def create(self, spec: JobSpec) -> JobRow:
        """A new job, enabled: what ``feed`` of ``Enable`` holds for it, the step taken
        by ``first_enable`` on the schedule its spec was validated with."""
        job = self.batch.add(spec, next(self.ids))
        if job.snapshot != _NEW:  # not the state first_enable is the machine's step of
            return self.feed(job, Enable(), spec=spec, enabled=True)
        stepper = self.engine.stepper
        result = first_enable(self.now, spec.parsed_schedule(), stepper.nonces())
        ticks = [stepper.tick_message(job, a.when, a.nonce, self.now) for a in result.actions]
        fed = Stepped(result.snapshot, ticks)
        watchdog_at = stepper.settle_tick(job, Enable(), fed)
        self.messages += fed.messages
        return self.batch.save(job, fed.snapshot, watchdog_at=watchdog_at, spec=spec, enabled=True)

    def feed(
        self, job: JobRow, event: Event, *, spec: JobSpec | None = None, **flags: Any
    ) -> JobRow:
        """Step ``job`` as ``Engine.feed`` does; returns the job as saved."""
        held = self.engine.feed_held(job, event, self.now, spec=spec)
        if held is not None:
            fed, watchdog_at = held
            self.messages += fed.messages
            return self.batch.save(job, fed.snapshot, watchdog_at=watchdog_at, spec=spec, **flags)
        self.batch.write(self.conn)
        fed = self.engine.feed(self.conn, self._lock(job.id), event, self.now, spec=spec, **flags)
        self.messages += fed.messages
        return self._lock(job.id)

    def delete(self, job_id: int) -> None:
        self.doomed.append(job_id)

    def flush(self) -> None:
        """Write what is held once it is a chunk: the held rows go, and their memory
        with them. Call it between jobs, each job's steps all taken."""
        if len(self.batch) >= CHUNK:
            self.batch.write(self.conn)

    def write(self, label: str) -> list[Message]:
        """Write what is held and delete the doomed jobs; the messages to send (with a
        fill of each pool a deleted job's runs held places in)."""
        with progress.stage(label, len(self.batch), "jobs") as advance:
            self.batch.write(self.conn, advance)
        freed = pool_store.held_by(self.conn, self.doomed)
        job_store.delete_jobs(self.conn, self.doomed)
        return [*self.messages, *(pools.Fill(pool) for pool in freed)]

    def _lock(self, job_id: int) -> JobRow:
        job = job_store.lock_job(self.conn, job_id)
        assert job is not None  # locked by lock_jobs, or made in this transaction
        return job


@dataclass
class _Changes:
    """What an apply changes, told from the jobs' heads (id, enabled, revision) alone:
    the specs to create or update, in the file's order, with the id of the job each
    updates, and the jobs to disable or delete. Only the jobs it writes are then locked
    and read whole."""

    report: ApplyReport = field(default_factory=ApplyReport)
    declared: list[tuple[JobSpec, int | None]] = field(default_factory=list)
    retired: list[int] = field(default_factory=list)

    @classmethod
    def of(
        cls, project: str, specs: list[JobSpec], heads: dict[str, JobHead], *, prune: bool
    ) -> _Changes:
        changes = cls(ApplyReport(project))
        report, left = changes.report, dict(heads)
        for spec in specs:
            head = left.pop(spec.name, None)
            if head is not None and head.enabled and head.revision == spec.revision:
                report.unchanged.append(spec.id)
                continue
            (report.created if head is None else report.updated).append(spec.id)
            changes.declared.append((spec, None if head is None else head.id))
        for name, head in left.items():  # no longer declared
            if prune or head.enabled:
                (report.deleted if prune else report.disabled).append(f"{project}/{name}")
                changes.retired.append(head.id)
        return changes

    @property
    def new(self) -> int:
        return sum(1 for _, job_id in self.declared if job_id is None)

    @property
    def written(self) -> list[int]:
        """The jobs it writes (or deletes), to lock."""
        return [job_id for _, job_id in self.declared if job_id is not None] + self.retired


def _declare_all(steps: _Steps, project: str, changes: _Changes, locked: dict[int, JobRow]) -> None:
    """Create or update each job whose spec is new or changed, in the file's order."""
    total = len(changes.declared)
    with progress.stage(f"apply {project}: preparing", total, "jobs") as advance:
        for spec, job_id in changes.declared:
            _declare(steps, None if job_id is None else locked[job_id], spec)
            steps.flush()
            advance(1)


def _retire_all(
    steps: _Steps, changes: _Changes, locked: dict[int, JobRow], *, prune: bool
) -> None:
    """Delete (``prune``) or disable the enabled jobs that the file no longer declares."""
    for job_id in changes.retired:
        if prune:
            steps.delete(job_id)
        else:
            flags = dict(enabled=False, paused=False, pause_reason=None)
            steps.feed(locked[job_id], Disable(), **flags)


def _declare(steps: _Steps, job: JobRow | None, spec: JobSpec) -> None:
    """Create or update the job ``spec`` declares, and pause or resume it as it says."""
    if job is None:
        _declare_pause(steps, steps.create(spec), spec, was_paused=None)
        return
    was_paused = job.spec.get("paused")
    job = steps.feed(job, _event_for(job, spec), spec=spec, enabled=True)
    _declare_pause(steps, job, spec, was_paused=was_paused)


def first_enable(now: datetime, schedule: Schedule, nonce: int) -> Step:
    """``statemachine.step`` of ``Enable`` on a new job (``JobSnapshot()``: disabled,
    nothing active, waiting or running), without the ``transitions`` machine, whose
    dispatch was half the cost of stepping 100,000 new jobs. From that snapshot every
    condition of the machine's ``enable`` is false but the last one's (no run to resume
    or start), whatever the overlap and misfire policies, and ``arm`` ticks at the
    schedule's first slot after now. ``tests/unit/test_first_enable.py`` holds it to
    the machine's step over many specs."""
    when = schedule.next_after(now)
    nonce_of_tick = None if when is None else nonce
    snapshot = JobSnapshot(state=JobState.SCHEDULED, tick_at=when, tick_nonce=nonce_of_tick)
    return Step(snapshot, [] if when is None else [TickLater(when, nonce)], changed=True)


def _send(engine: Engine, messages: list[Message], label: str) -> None:
    """``engine.send`` in pieces, for the progress bar. Each ETA's ticks are cut where
    ``send`` cuts them into batches anyway, so the messages are the same."""
    ticks: dict[datetime, list[Message]] = {}
    pieces: list[list[Message]] = [[m for m in messages if not isinstance(m, SendTick)]]
    for message in messages:
        if isinstance(message, SendTick):
            ticks.setdefault(message.eta, []).append(message)
    size = engine.batch * 50
    pieces += [group[i : i + size] for group in ticks.values() for i in range(0, len(group), size)]
    # One producer for all of them, where the port has that (not a test's).
    together = getattr(engine.port, "sending", contextlib.nullcontext)
    with progress.stage(label, len(messages), "messages") as advance, together():
        for piece in pieces:
            engine.send(piece)
            advance(len(piece))


def _refuse_trigger_cycles(conn: Connection, project: str, specs: list[JobSpec]) -> None:
    """A cycle of triggers turns one run into runs without end: refuse the file."""
    declared = {s.id: s.controls["triggers"] for s in specs if "triggers" in s.controls}
    if declared:
        job_store.lock_trigger_graph(conn)
    cycle = reachable_cycle(
        declared,
        lambda refs: {
            ref: spec.get("triggers", [])
            for ref, spec in job_store.specs_of(conn, refs, besides=project).items()
        },
    )
    if cycle:
        _refuse_cycle("triggers", "trigger", cycle, declared)


def _refuse_bad_requirements(conn: Connection, project: str, specs: list[JobSpec]) -> None:
    """Every upstream a job requires exists (in this file, if it is of this project),
    and no jobs require each other in a cycle: each would wait for the other forever."""
    declared = {
        s.id: upstream.declared_upstreams(s.id, s.controls)
        for s in specs
        if "requires" in s.controls
    }
    if not declared:
        return
    job_store.lock_trigger_graph(conn)  # the graph of requirements too
    ids = {s.id for s in specs}
    elsewhere = {ref for refs in declared.values() for ref in refs if ref not in ids}
    missing = {ref for ref in elsewhere if ref.rpartition("/")[0] == project}
    missing |= elsewhere - missing - job_store.existing(conn, elsewhere)
    for ref, refs in declared.items():
        for name in sorted(set(refs) & missing):
            where = "in this file" if name.rpartition("/")[0] == project else "in the database"
            job = f"job {ref.rpartition('/')[2]!r}"
            raise SpecError("requires", f"no job named {name!r} {where}", where=job)
    cycle = reachable_cycle(
        declared,
        lambda refs: {
            ref: upstream.declared_upstreams(ref, spec)
            for ref, spec in job_store.specs_of(conn, refs, besides=project).items()
        },
    )
    if cycle:
        _refuse_cycle("requires", "require", cycle, declared)


def _refuse_required_deletes(conn: Connection, project: str, deleted: list[str]) -> None:
    """A job that another project's job requires is not deleted: that job's every slot
    would wait for it in vain. (A job of this project that requires it is in the file,
    which names it, or is deleted too.)"""
    if not deleted:
        return
    job_store.lock_trigger_graph(conn)  # no requirement of it is added meanwhile
    names = [ref.rpartition("/")[2] for ref in deleted]
    required = upstream_store.required_by_others(conn, project, names)
    for name, downstream in sorted(required.items()):
        why = f"{downstream} requires it: take it out of that job's requires first"
        raise SpecError("prune", why, where=f"job {name!r}")


def _refuse_unknown_pools(conn: Connection, specs: list[JobSpec], sizes: dict[str, int]) -> None:
    """A job's pool is declared: in the file, or before (a file, ``cronchain pool set``)."""
    named = {s.controls["pool"] for s in specs if "pool" in s.controls}
    unknown = named - set(sizes) - pool_store.existing(conn, named - set(sizes))
    for spec in specs:
        if spec.controls.get("pool") in unknown:
            name = spec.controls["pool"]
            why = f"no pool named {name!r}: declare it under pools:, or cronchain pool set {name} N"
            raise SpecError("pool", why, where=f"job {spec.name!r}")


def _refuse_cycle(key: str, verb: str, cycle: list[str], declared: dict[str, Any]) -> None:
    first = next((ref for ref in cycle if ref in declared), cycle[0])
    raise SpecError(
        key,
        f"the jobs {verb} each other in a cycle: {' -> '.join(cycle)}",
        where=f"job {first.rpartition('/')[2]!r}",
    )


def _declare_pause(
    steps: _Steps, job: JobRow, spec: JobSpec, *, was_paused: str | bool | None
) -> None:
    """``paused`` in a changed spec pauses the job; taken out, it resumes the job the spec
    had paused, if it is still paused for that reason. An operator's own pause or resume
    stands until the spec changes, and an operator's own pause even then."""
    declared = spec.controls.get("paused")
    paused_by_spec = job.pause_reason == (was_paused if isinstance(was_paused, str) else None)
    if declared and not job.paused:
        reason = declared if isinstance(declared, str) else None
        steps.feed(job, Pause(reason), paused=True, pause_reason=reason)
    elif not declared and was_paused and job.paused and paused_by_spec:
        steps.feed(job, Resume(), paused=False, pause_reason=None)


def _event_for(job: JobRow, spec: JobSpec) -> Event:
    """Enable a new or disabled job; move the tick of an enabled one whose schedule
    changed. Enable on an enabled job is a no-op for the machine: only the spec is saved."""
    when = (spec.schedule, spec.timezone, spec.days)
    if job.enabled and (job.schedule, job.timezone, job.days) != when:
        return ScheduleChanged()
    return Enable()


@dataclass
class FolderReport:
    applied: dict[str, ApplyReport] = field(default_factory=dict)  # file name -> report
    failed: dict[str, str] = field(default_factory=dict)  # file name -> error
    owners: dict[str, str] = field(default_factory=dict)  # project -> the file declaring it


_PROJECT_LINE = re.compile(rb"^project:[ \t]*[\"']?([A-Za-z0-9][A-Za-z0-9_.-]{0,99})", re.M)


def _load_claiming(path: Path, owners: dict[str, str]) -> JobFile:
    """Load a job file; one that does not load still claims the project its text names,
    so that a typo in it does not hand its project to the next file, which would then
    disable its jobs."""
    try:
        return load_job_file(path)
    except SpecError:
        with contextlib.suppress(OSError), path.open("rb") as file:
            if m := _PROJECT_LINE.search(file.read(64 * 1024)):
                owners.setdefault(m.group(1).decode(), path.name)
        raise


def reconcile_folder(engine: Engine, folder: Path) -> FolderReport:
    """Apply each ``*.yaml``/``*.yml`` file of ``folder``, each on its own: a file that
    does not load or apply is reported and left out, and the other files are still
    applied. A project belongs to one file, the first by name: a second file naming it
    is refused (two files of one project would disable each other's jobs on every pass).
    A project whose file is removed keeps its jobs: empty the file (``jobs: []``) to
    disable them. A database outage is not a file's fault: it ends the pass."""
    report = FolderReport()
    owners = report.owners
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            job_file = _load_claiming(path, owners)
            owner = owners.setdefault(job_file.project, path.name)
            if owner != path.name:
                why = f"is declared by {owner} already; a project belongs to one file"
                raise SpecError("project", f"{job_file.project!r} {why}", where=str(path))
            report.applied[path.name] = apply(
                engine,
                job_file.project,
                job_file.jobs,
                channels=job_file.channels,
                pool_sizes=job_file.pools,
            )
        except TransientError:
            raise
        except (CronchainError, OSError) as err:
            report.failed[path.name] = str(err)
        except Exception as err:  # a bug, but one file's: the others still apply
            log.exception("job file %s: applying it failed", path)
            report.failed[path.name] = f"{type(err).__name__}: {err}"
    return report
