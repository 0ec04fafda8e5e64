"""``requires``: a slot starts once each of its upstream jobs has succeeded recently.

Freshness is measured from the slot, not from now, so that a backfill of last March
checks last March's upstream runs. An upstream run counts when it SUCCEEDED and is filed
(its slot; a triggered run: when it was triggered) from ``succeeded_within`` before the
slot until the slot stops waiting (``max_wait`` after it), the window the slot's own
deadline closes.

A slot whose upstreams are not met is written WAITING with reason ``upstream``: to the
job's machine it is the run it started (QUEUED), so the overlap policy treats the next
slot as it would beside a run. It is released by the transaction that records the last
upstream's success (``release_after``), which locks the waiting job: a slot held by a
transaction that could not yet see that success commits first, and is then found. When
``max_wait`` passes the watchdog applies ``on_unmet`` (``lapse``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection

from cronchain.scheduler import debuglog
from cronchain.scheduler.alerts import raising
from cronchain.scheduler.core.effects import InProcess, Message, Stepped
from cronchain.scheduler.core.host import Admitting, Ended, Held
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.spec.controls import Controls, controls_of
from cronchain.scheduler.storage import job_store, run_store, upstream_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.workflows.pools import Fill
from cronchain.scheduler.workflows.triggergraph import target_ref
from cronchain.scheduler.workflows.unmet import settle as unmet_settle
from cronchain.statemachine import InvocationStatus

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Host
    from cronchain.scheduler.spec.jobspec import JobSpec

log = logging.getLogger("cronchain.engine")
REASON = upstream_store.REASON
# How long a look again waits for an upstream's transaction: a success commits in
# milliseconds; a row held longer (an apply of a large file) is left to the watchdog,
# whose pass looks again, rather than holding up every look again queued behind it.
WAIT_MOST = "5s"
# How long after its window closes a waiting run is still looked for by a success: the
# watchdog settles it long before (within an interval), unless it was stopped that long.
LATE = timedelta(days=1)
S = InvocationStatus


@dataclass(frozen=True)
class Recheck(InProcess):
    """Look again at a job's runs that wait for their upstreams: a success could not
    release them in its own transaction, because another held the job. Carried out in
    this process, once that transaction has committed (``upstream_waits.look_again_soon``)."""

    job_id: int


@dataclass(frozen=True)
class Check:
    """One upstream as a slot found it: ``success`` is when the run that meets it is
    filed, None if none does; ``last_success`` the upstream's latest success of any
    slot; ``exists`` False if no job has that name."""

    job: str
    since: datetime
    until: datetime
    success: datetime | None
    last_success: datetime | None
    exists: bool = True
    busy: bool = False  # unmet, its row held by another transaction (see ``check``)

    @property
    def met(self) -> bool:
        return self.success is not None

    def record(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "met": self.met,
            "success": iso(self.success),
            "last_success": iso(self.last_success),
            "since": iso(self.since),
            "until": iso(self.until),
            **({} if self.exists else {"exists": False}),
        }


def said(check: dict[str, Any]) -> str:
    """An upstream as a run recorded it (``Check.record``), in words."""
    if check.get("exists") is False:
        return f"{check['job']} is not a job"
    if check["met"]:
        return f"{check['job']} succeeded (filed {check['success']})"
    return (
        f"{check['job']} has no success filed from {check['since']} to {check['until']}"
        f" (last success: {check['last_success'] or 'never'})"
    )


def check(
    conn: Connection,
    job: JobRow,
    reference: datetime,
    fresh: Mapping[str, datetime] | None = None,
) -> list[Check]:
    """Each upstream of ``job`` for a slot at ``reference`` (a triggered run: when it was
    triggered). ``fresh``: successes this transaction records and has not written yet,
    by upstream (``project/name``) and where each is filed.

    The upstreams' rows answer (``last_success_filed``, their newest success's filed
    time): no success in the window if it is before the window, one if it is within it.
    Only an upstream whose newest success is filed after the window (a backfill's slot,
    or a run that waited long), or that succeeded before 0013 kept the column, has its
    runs read.

    A run found unmet waits (or waits on): the unmet upstreams' rows are then read
    again under a share lock, which keeps any success of theirs from being recorded
    until this transaction has committed; a success's transaction reads the waiting runs
    after its upstream's lock (``release_after``), so it finds this one. An unmet
    upstream whose row another transaction holds (a success may be under way) is not
    waited for, since the caller holds job rows that transaction may want: it is marked
    ``busy``, and the run is looked at again once the caller has committed
    (``Recheck``, which first waits for such transactions holding nothing)."""
    controls = controls_of(job)
    wanted = [
        (target_ref(job.ref, up.job), reference - up.within, reference + controls.max_wait)
        for up in controls.requires
    ]
    if not wanted:  # it requires nothing (now): met
        return []
    checks = _checked(conn, wanted, fresh or {})
    unmet = [(c.job, c.since, c.until) for c in checks if c.exists and not c.met]
    if unmet:
        shared = _checked(conn, unmet, fresh or {}, lock="skip")
        again = {c.job: c for c in shared if c.exists}
        checks = [
            c if c.met or not c.exists else again.get(c.job) or replace(c, busy=True)
            for c in checks
        ]
    return checks


def _checked(
    conn: Connection,
    wanted: Sequence[tuple[str, datetime, datetime]],
    fresh: Mapping[str, datetime],
    lock: Literal["skip"] | None = None,
) -> list[Check]:
    refs = [pair(ref) for ref, _, _ in wanted]
    found = {f"{r.project}/{r.name}": r for r in upstream_store.upstreams(conn, refs, lock)}
    checks = []
    for ref, since, until in wanted:
        row = found.get(ref)
        if row is None:
            checks.append(Check(ref, since, until, None, None, exists=False))
            continue
        unwritten = fresh.get(ref)
        stored = row.last_success_filed
        latest = max((t for t in (stored, unwritten) if t is not None), default=None)
        success = latest if latest is not None and since <= latest <= until else None
        too_new = latest is not None and latest > until
        unknown = row.last_success_filed is None and row.last_success_at is not None
        if success is None and (too_new or unknown):  # read its runs
            success = upstream_store.latest_success(conn, row.id, since, until)
            if unwritten is not None and since <= unwritten <= until:
                success = max(success or unwritten, unwritten)
        checks.append(Check(ref, since, until, success, row.last_success_at))
    return checks


def pair(ref: str) -> tuple[str, str]:
    project, _, name = ref.rpartition("/")
    return project, name


def record(
    checks: list[Check], now: datetime, inv: InvocationRow | None = None, *, released: bool = False
) -> dict[str, Any]:
    """What ``invocations.checks`` keeps of them: for a run that waited (``inv``), also
    since when it waited (``held_at``), and once it starts, when (``released_at``)."""
    kept: dict[str, Any] = {"checked_at": iso(now), REASON: [c.record() for c in checks]}
    held_at = (inv.checks or {}).get("held_at") if inv is not None else None
    if held_at is not None:
        kept["held_at"] = held_at
        if released:
            kept["released_at"] = iso(now)
    return kept


def unmet_text(checks: list[Check]) -> str:
    return "; ".join(said(c.record()) for c in checks if not c.met)


# --- holding and releasing ----------------------------------------------------------


def hold_columns(controls: Controls, checks: list[Check], log: str | None, now: datetime):
    """The columns of a run that waits for its upstreams, until ``max_wait`` after its
    slot: the end of its window, after which no success can meet it (a buffered run
    whose turn comes later than that is settled by the watchdog's next pass)."""
    deadline = max(c.until for c in checks)
    return dict(
        status=S.WAITING.value,
        reason=REASON,
        deadline=deadline,
        checks=record(checks, now) | {"held_at": iso(now)},
        log=debuglog.append(
            log, now, f"waits for upstream until {iso(deadline)}: {unmet_text(checks)}"
        ),
    )


class UpstreamHold:
    """The admission chain's first hold: a run of a job with ``requires`` starts once
    each upstream has succeeded within its window, and waits for them until then."""

    name = REASON

    def admit(self, conn: Connection, run: Admitting, now: datetime) -> Held | dict[str, Any]:
        job, controls = run.job, run.job.controls
        if not controls.requires:
            return {}
        checks = check(conn, job, run.reference)
        if all(c.met for c in checks):
            return {"checks": record(checks, now)}
        again: list[Message] = [Recheck(job.id)] if any(c.busy for c in checks) else []
        return Held(hold_columns(controls, checks, run.log, now), lambda _: again)

    def lapse(
        self, host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime
    ) -> Stepped:
        return lapse(host, conn, inv, job, now)


def release_after(
    host: Host,
    conn: Connection,
    upstream: JobRow,
    now: datetime,
    fresh: Mapping[str, datetime],
) -> list[Message]:
    """In the transaction that records a success of ``upstream`` (which holds its row):
    start each run that waited for it and now has every upstream met. ``fresh``: the
    successes this transaction records and may not have written yet (a group of
    outcomes holds its writes), by upstream and where each is filed; ``upstream``'s
    among them.

    The waiting runs are read after the upstream's lock, so a run made WAITING by a
    transaction that checked this upstream under a share lock (``check``) is committed
    and found; one that checked before this transaction locked the upstream sees this
    success. A waiting run another transaction holds is skipped, not waited for: that
    transaction looks at it with this upstream under a share lock, which waits for this
    one, and sees this success. Nothing here waits for a downstream's locks."""
    downstreams = upstream_store.waiting_downstreams(conn, upstream.project, upstream.name)
    if not downstreams:
        return []
    # A run whose window has closed (filed more than its max_wait ago) is the watchdog's.
    max_wait = max(Controls.of(spec).max_wait for spec in downstreams.values())
    since = now - max_wait - LATE
    waiting = run_store.held_runs(conn, list(downstreams), REASON, since, skip_locked=True)
    if not waiting:
        return []
    # A run that enters its pool here may be held meanwhile by another transaction that
    # read it waiting for its upstreams: each pool of these jobs is filled again.
    fills = {Controls.of(spec).pool for spec in downstreams.values()} - {None}
    jobs_of = {job.id: job for job in job_store.read_jobs(conn, {i.job_id for i in waiting})}
    messages: list[Message] = [Fill(pool) for pool in sorted(fills)]  # type: ignore[type-var]
    for inv in waiting:
        messages += look_at(host, conn, jobs_of[inv.job_id], inv, now, fresh)
    return messages


class RequirementsMet:
    """Hears a success of a job that others require: each run that waited for it and
    now has every upstream met goes on (``release_after``), begun in the success's own
    transaction once every listener has heard."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool:
        return False

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]:
        if end.status != S.SUCCEEDED.value or not end.job.downstream:
            return []
        assert end.was.filed_at is not None  # a run is filed at its slot or its trigger
        end.fresh[end.job.ref] = end.was.filed_at
        end.release(release_after(host, conn, end.job, end.now, end.fresh))
        return []


def recheck(host: Host, conn: Connection, job: JobRow, now: datetime) -> list[Message]:
    """Start each of ``job``'s runs that wait for their upstreams and now have them met;
    record what the others wait for now."""
    messages: list[Message] = []
    for inv in run_store.held_runs(conn, [job.id], REASON):
        messages += look_at(host, conn, job, inv, now)
    return messages


def look_at(
    host: Host,
    conn: Connection,
    job: JobRow,
    inv: InvocationRow,
    now: datetime,
    fresh: Mapping[str, datetime] | None = None,
) -> list[Message]:
    checks = check(conn, job, _reference(inv), fresh)
    if not all(c.met for c in checks):  # still waiting: what it waits for now
        run_store.update_invocation(conn, inv, checks=record(checks, now, inv))
        return [Recheck(job.id)] if any(c.busy for c in checks) else []
    met = {
        "checks": record(checks, now, inv, released=True),
        "log": debuglog.append(inv.log, now, "upstreams met"),
    }
    return host.go_on(conn, job, inv, met, now, REASON)


def lapse(host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime) -> Stepped:
    """``max_wait`` has passed for a waiting run (the watchdog, both rows locked): start
    it if its upstreams are met after all, else as ``on_unmet`` says; unless an unmet
    upstream's success may be under way (``busy``): it is looked at again first."""
    if any(c.busy for c in check(conn, job, _reference(inv))):
        return Stepped(job.snapshot, [Recheck(job.id)])
    columns, messages, ended = settle(conn, job, inv, now, waited=True)
    if ended is None:
        messages += host.go_on(conn, job, inv, columns, now, REASON)
        return Stepped(job.snapshot, messages)
    run_store.update_invocation(conn, inv, **columns)
    fed = host.runs.finished(conn, job, inv, ended, now)
    fed.messages[:0] = messages
    return fed


def settle(
    conn: Connection, job: JobRow, inv: InvocationRow, now: datetime, *, waited: bool
) -> tuple[dict[str, Any], list[Message], Outcome | None]:
    """Whether a run that may wait no longer (``waited``: for ``max_wait``; else a
    backfill's, which settles at once) starts: met, or ``on_unmet: run``. Returns the
    columns to write (with the start; or ended as ``on_unmet`` says), the alert an
    unmet upstream raises, and how the run ends: None if it starts."""
    checks = check(conn, job, _reference(inv))
    unmet = unmet_text(checks)
    starting: dict[str, Any] = dict(checks=record(checks, now, inv, released=True))
    if not unmet:
        return starting | {"log": debuglog.append(inv.log, now, "upstreams met")}, [], None
    alerts: list[Message] = [*raising.on_upstream_stale(conn, job, inv, unmet, now)]
    within = f" within max_wait ({controls_of(job).max_wait})" if waited else ""
    columns, ended = unmet_settle(job, inv, REASON, f"upstream not met{within}: {unmet}", now)
    if ended is None:
        return starting | columns, alerts, None
    return columns | {"checks": record(checks, now, inv)}, alerts, ended


def _reference(inv: InvocationRow) -> datetime:
    """The time a run's upstreams are measured from: its slot, or when it was triggered."""
    assert inv.filed_at is not None
    return inv.filed_at


# --- what apply writes -------------------------------------------------------------


def write_requirements(
    host: Host, conn: Connection, project: str, specs: Sequence[JobSpec], written: list[int]
) -> list[Message]:
    """After an apply of ``project`` (``specs`` its file, ``written`` the ids of the jobs
    it changed, all locked): make ``requirements`` hold what the project's stored specs
    require (a disabled job's kept spec too: its waiting runs are still released), flag
    every job some requirement names, and look again at the waiting runs of the jobs it
    changed, whose requirements may be gone or new.

    A flag is never cleared: a success of a job that no longer has a downstream reads
    ``requirements`` once and finds nothing, where a flag cleared too eagerly would let
    a run wait for a success that never looks for it."""
    messages: list[Message] = []
    if any("requires" in s.controls for s in specs) or upstream_store.ever_required(conn, project):
        rows = [
            {"job_id": r.id, "project": ref.rpartition("/")[0], "name": ref.rpartition("/")[2]}
            for r in upstream_store.requiring(conn, project)
            for ref in declared_upstreams(f"{project}/{r.name}", r.spec)
        ]
        upstream_store.replace_requirements(conn, project, rows)
        for job_id in upstream_store.waiting_among(conn, written):
            job = job_store.lock_job(conn, job_id)
            if job is not None:
                messages += recheck(host, conn, job, host.clock())
    upstream_store.flag_required(conn)
    return messages


def declared_upstreams(job_ref: str, controls: Mapping[str, Any]) -> list[str]:
    """The refs (``project/name``) a job's normalized controls require."""
    return [target_ref(job_ref, r["job"]) for r in controls.get("requires", ())]
