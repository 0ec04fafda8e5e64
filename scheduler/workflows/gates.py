"""``gates``: readiness checks a slot must pass before it starts.

A gate is an ``http`` GET that must answer 2xx, or a ``celery`` task on the user's
workers that must return True. A run whose upstreams allow it (``scheduler.workflows.upstream``)
and whose job has gates is written WAITING with reason ``gate``; to the job's machine
it is the run it started, as a run waiting for its upstreams is. Every gate is then
asked on the work path (``cronchain.gate``), never on the control path: a gate's
endpoint, however slow, delays only its own slot.

Each gate is asked every ``every``, each ask a numbered check. A check is taken in a
transaction (a repeated or late message finds it taken and does nothing), which sends
the next one with an ETA before the check is made; so a check that hangs or never
answers does not stop the gate being asked again. The run starts in the transaction
that records the answer which makes every gate's latest answer a yes. Answers are kept
on the run (``invocations.checks``, the last ``KEPT`` of each gate) for ``explain`` and
``history``.

The slot waits until ``max_wait`` after it (as for upstreams), but always for at least
one ``every``: a backfill's slot, or one that waited long for its upstreams, gets one
check. Then ``on_unmet`` applies: at the last check's answer, or by the watchdog's pass
if no answer comes; the watchdog also asks again a gate whose check message was lost.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler import debuglog, outside
from cronchain.scheduler.core.effects import CheckGate, Message, Stepped
from cronchain.scheduler.core.host import Admitting, Held
from cronchain.scheduler.invokers import Call, Outcome
from cronchain.scheduler.settings import ETA_HORIZON
from cronchain.scheduler.spec.controls import Controls, controls_of
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.workflows.unmet import settle as unmet_settle
from cronchain.statemachine import InvocationStatus, Reason

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Host

REASON = Reason.GATE  # the hold's name: a run WAITING for its gates, and their checks
KEPT = 20  # the answers of each gate kept on the run, the latest
SAID = 300  # characters of an answer kept
S = InvocationStatus


def waiting_columns(
    controls: Controls,
    reference: datetime,
    log: str | None,
    now: datetime,
    checks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The columns of a run that may start once its gates say yes (``checks``: what was
    checked of it before, kept). ``reference`` is its slot, or when it was triggered."""
    shortest = min(timedelta(seconds=g["every"]) for g in controls.gates)
    deadline = max(reference + controls.max_wait, now + shortest)
    state = {
        "since": iso(now),
        "until": iso(deadline),
        "gates": [{"name": g["name"], "checks": 0, "answers": []} for g in controls.gates],
    }
    names = ", ".join(g["name"] for g in controls.gates)
    return dict(
        status=S.WAITING.value,
        reason=REASON,
        deadline=deadline,
        checks={**(checks or {}), REASON: state},
        log=debuglog.append(log, now, f"waits for its gates ({names}) until {iso(deadline)}"),
    )


def first_checks(job: JobRow, invocation_id: int) -> list[Message]:
    return [CheckGate(invocation_id, g["name"], 1, job.id) for g in controls_of(job).gates]


class GateHold:
    """The admission chain's hold of a job with gates: its run waits until every gate's
    latest answer is a yes, and its gates are asked from the first check once its row is
    written."""

    name = REASON

    def admit(self, conn: Connection, run: Admitting, now: datetime) -> Held | dict[str, Any]:
        job, controls = run.job, run.job.controls
        if not controls.gates:
            return {}
        held = waiting_columns(controls, run.reference, run.log, now, run.checks)
        return Held(held, lambda invocation_id: first_checks(job, invocation_id))

    def lapse(
        self, host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime
    ) -> Stepped:
        return lapse(host, conn, inv, job, now)


# --- checks ---------------------------------------------------------------------------


def claim(
    host: Host, invocation_id: int, name: str, number: int, job_id: int
) -> tuple[tuple[JobRow, dict[str, Any]] | None, list[Message]]:
    """Take check ``number`` of the run's gate ``name``. Returns its job and the gate as
    the job declares it, None if the run no longer waits for its gates or the check
    was taken; and what to send after commit, before this check is made: the next
    check, and (the job's gates having changed) the first checks of its new gates."""
    with host.transaction() as conn:
        locked = host.lock(conn, invocation_id, job_id)
        if locked is None or _state(locked[0]) is None:
            return None, []
        inv, job = locked
        now = host.clock()
        changed, messages = _follow(inv, job)
        gate = _entry(inv, name)
        if gate is None or gate["checks"] >= number:
            if changed:  # the gates left may all have said yes
                messages += _record(host, conn, inv, job, inv.log, now)
            return None, messages
        due = _due(gate, number)
        if not changed and due is not None and due > now + EARLY:  # a hop: send it on
            return None, [CheckGate(invocation_id, name, number, job_id, _held(due, now))]
        declared = _declared(job, name)
        assert inv.deadline is not None and declared is not None
        next_at = now + timedelta(seconds=declared["every"])
        last = next_at >= inv.deadline
        gate["checks"] = number
        gate["next_at"] = None if last else iso(next_at)
        run_store.update_invocation(conn, inv, checks=inv.checks)
    if not last:
        messages.append(CheckGate(invocation_id, name, number + 1, job_id, _held(next_at, now)))
    return (job, declared), messages


# A check delivered this much before its time is taken: its ETA was read in the worker's
# clock, which may differ from this one by the clocks' measurement error.
EARLY = timedelta(seconds=1)


def _held(due: datetime, now: datetime) -> datetime:
    """The ETA of a check due at ``due``: no further ahead than a tick's (``ETA_HORIZON``).
    A worker holds a message with an ETA unacknowledged, and a broker drops one held
    long (RabbitMQ closes the worker's channel at its consumer_timeout, Redis delivers
    it again after its visibility timeout): a check due later is sent on when it comes."""
    return min(due, now + ETA_HORIZON)


def _due(gate: dict[str, Any], number: int) -> datetime | None:
    """When check ``number`` of ``gate`` is due, if it is the next one and has a time."""
    if gate["checks"] != number - 1 or not gate.get("next_at"):
        return None
    return datetime.fromisoformat(gate["next_at"])


def _state(inv: InvocationRow) -> dict[str, Any] | None:
    """The gates' state of a run that waits for them; None for any other run."""
    if inv.status != S.WAITING.value or inv.reason != REASON:
        return None
    return (inv.checks or {}).get(REASON)


def _entry(inv: InvocationRow, name: str) -> dict[str, Any] | None:
    return next((g for g in _state(inv)["gates"] if g["name"] == name), None)  # type: ignore[index]


def _declared(job: JobRow, name: str) -> dict[str, Any] | None:
    """The gate named ``name`` as the job declares it now; None if it no longer does."""
    return next((g for g in controls_of(job).gates if g["name"] == name), None)


def _follow(inv: InvocationRow, job: JobRow) -> tuple[bool, list[Message]]:
    """Make the run's gates the job's (an apply changed them while it waited): a gate
    gone is no longer asked, a new one is asked from its first check; the answers of
    those kept stay. Returns whether they changed, and the new ones' first checks."""
    state = _state(inv)
    assert state is not None
    kept = {g["name"]: g for g in state["gates"]}
    names = [g["name"] for g in controls_of(job).gates]
    if names == list(kept):
        return False, []
    state["gates"] = [kept.get(n) or {"name": n, "checks": 0, "answers": []} for n in names]
    return True, [CheckGate(inv.id, n, 1, job.id) for n in names if n not in kept]


def http_call(job: JobRow, invocation_id: int, number: int, gate: dict[str, Any]) -> Call:
    """A gate's GET as the ``http`` invoker makes it (its guard, deadline, redaction)."""
    options = {**gate["http"], "method": "GET", "body": None}
    return Call(invocation_id, number, job.ref, None, options, kind="http", job_id=job.id)


def answer_of(outcome: Outcome) -> tuple[bool, str]:
    """A GET's outcome as a gate's answer: a yes, and what it said (its status and the
    start of its body, or why there was none; the gate names the URL)."""
    # Without an answer the error is "http: GET URL: why", the URL without spaces.
    said = outcome.log[0] if outcome.log else (outcome.error or "no answer").split(" ", 3)[-1]
    return outcome.status == S.SUCCEEDED, said[:SAID]


def answer(
    host: Host,
    invocation_id: int,
    name: str,
    number: int,
    job_id: int,
    yes: bool,
    said: str,
) -> None:
    """Record check ``number``'s answer (an older check's, come after a newer one's, is
    dropped). The answer that makes every gate's latest a yes starts the run; a no to
    the last check there will be applies ``on_unmet`` at once."""
    with host.transaction() as conn:
        locked = host.lock(conn, invocation_id, job_id)
        if locked is None or _state(locked[0]) is None:
            return
        inv, job = locked
        now = host.clock()
        changed, messages = _follow(inv, job)
        gate = _entry(inv, name)
        if gate is None or number <= gate.get("answered", 0):  # not this gate's, or old
            if changed:  # but the job's gates changed
                messages += _record(host, conn, inv, job, inv.log, now)
            return host.send(messages)
        said = outside.kept(said, SAID)  # what an endpoint or a task said
        gate["answered"] = number
        answered = {"check": number, "at": iso(now), "yes": yes, "said": said}
        gate["answers"] = [*gate["answers"], answered][-KEPT:]
        word = "yes" if yes else "no"
        log = debuglog.append(inv.log, now, f"gate {name} check {number}: {word}, {said}")
        # No check of it is coming: this was its last, and the slot cannot pass.
        final = not yes and gate.get("next_at") is None and number >= gate["checks"]
        if final:
            messages += lapse(host, conn, replace(inv, log=log), job, now).messages
        else:
            messages += _record(host, conn, inv, job, log, now)
        messages = host.attempts.begin_released(conn, messages)  # the runs this answer starts
    host.send(messages)


def _record(
    host: Host,
    conn: Connection,
    inv: InvocationRow,
    job: JobRow,
    log: str | None,
    now: datetime,
) -> list[Message]:
    """Write the run's gates' state; if every gate's latest answer is a yes, the run
    starts (into its pool, or at once)."""
    state = _state(inv)
    assert state is not None
    if not all(_passed(g) for g in state["gates"]):
        run_store.update_invocation(conn, inv, checks=inv.checks, log=log)
        return []
    state["released_at"] = iso(now)
    columns = {"checks": inv.checks, "log": debuglog.append(log, now, "gates said yes")}
    return host.go_on(conn, job, inv, columns, now, REASON)


def _passed(gate: dict[str, Any]) -> bool:
    return bool(gate["answers"]) and gate["answers"][-1]["yes"]


def said(gate: dict[str, Any]) -> str:
    """A gate as a run recorded it, in words: its latest answer."""
    if not gate["answers"]:
        asked = gate["checks"]
        return f"gate {gate['name']}: no answer" + (f" to {asked} check(s)" if asked else " yet")
    last = gate["answers"][-1]
    word = "yes" if last["yes"] else "no"
    return (
        f"gate {gate['name']} said {word} at check {last['check']} ({last['at']}): {last['said']}"
    )


def answers_said(gate: dict[str, Any]) -> list[str]:
    """Each answer a gate gave a run, in words, one a line (what ``history --invocation``
    and a run's page list); its ``said`` if it gave none."""
    return [
        f"gate {gate['name']} check {a['check']} at {a['at']}:"
        f" {'yes' if a['yes'] else 'no'}, {a['said']}"
        for a in gate["answers"]
    ] or [said(gate)]


def unmet_text(state: dict[str, Any]) -> str:
    return "; ".join(said(g) for g in state.get("gates", ()) if not _passed(g))


# --- when the wait ends ---------------------------------------------------------------


def lapse(host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime) -> Stepped:
    """The run may wait for its gates no longer (both rows locked): it starts if
    ``on_unmet: run``, else ends SKIPPED or FAILED with reason ``gate``."""
    state = (inv.checks or {}).get(REASON, {})
    unmet = unmet_text(state) or "no gate said yes"
    error = f"gates not passed by {state.get('until')}: {unmet}"
    columns, ended = unmet_settle(job, inv, REASON, error, now)
    columns["checks"] = inv.checks
    if ended is None:
        return Stepped(job.snapshot, host.go_on(conn, job, inv, columns, now, REASON))
    run_store.update_invocation(conn, inv, **columns)
    return host.runs.finished(conn, job, inv, ended, now)


def overdue(conn: Connection, now: datetime, limit: int) -> list[Message]:
    """The watchdog's: each gate of a waiting run whose next check is past due by
    ``now`` (its message lost) is asked again, at most ``limit``; a check taken
    meanwhile drops it. Every waiting run is read, so that those past the first
    ``limit`` are looked at too (their rows are small)."""
    messages: list[Message] = []
    for row in run_store.waiting_checks(conn, REASON):
        state = (row.checks or {}).get(REASON, {})
        for gate in state.get("gates", ()):
            due = gate.get("next_at") if gate["checks"] else state.get("since")
            if due is not None and datetime.fromisoformat(due) < now:
                messages.append(CheckGate(row.id, gate["name"], gate["checks"] + 1, row.job_id))
        if len(messages) >= limit:
            break
    return messages


class OverdueChecks:
    """The watchdog's duty for gates: ask again each gate whose next check is overdue
    (its message lost) by more than a repair's grace and the pass's ``backlog``."""

    def sweep(
        self, host: Host, now: datetime, limit: int, backlog: timedelta
    ) -> tuple[dict[str, int], list[Message]]:
        with host.transaction() as conn:
            asked = overdue(conn, now - backlog - host.repair_grace, limit)
        return {"asked": len(asked)}, asked
