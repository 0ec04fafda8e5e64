"""``explain``: why a job did, or did not, run at a given time.

The answer comes from the records alone: the invocation row of the slot, the job's
changes (``job_changes``: the schedule in force and whether the job was enabled or
paused), the job's pending tick, and for a day whose records retention dropped, the
job's rollup of that day (``pruned``). Each answer has a stable code for scripts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from cronchain.scheduler.storage import alert_store, history_days, job_store, run_store
from cronchain.scheduler.storage.alert_store import AlertRow, delivery_text
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.timing.schedules import Schedule, stored_schedule
from cronchain.scheduler.workflows import gates
from cronchain.scheduler.workflows.upstream import said
from cronchain.statemachine.reasons import Reason, meaning_of


def explain(conn: Connection, ref: str, at: datetime, now: datetime) -> dict[str, Any]:
    job_id = job_store.resolve_job(conn, ref)
    job = job_store.read_job(conn, job_id)
    changes = job_store.changes_of(conn, job_id)
    base = {"job": job.ref, "at": iso(at)}
    inv = run_store.invocation_at(conn, job_id, at)
    if inv is not None:  # also a backfill's, from before the job existed
        return base | _with_alerts(_ran(inv), alert_store.of_invocation(conn, job_id, inv["id"]))
    if not changes or at < changes[0]["at"]:
        created = changes[0]["at"] if changes else None
        return base | _answer("not_created", f"the job did not exist yet (created {iso(created)})")
    pruned = _pruned(conn, job_id, at)
    if pruned is not None:
        return base | pruned

    in_force = [c for c in changes if c["at"] <= at][-1]
    schedule = stored_schedule(in_force["schedule"], in_force["timezone"], in_force["days"])
    days = ", days: both" if in_force["days"] else ""
    what = f"{in_force['schedule']!r} ({in_force['timezone']}{days})"
    base["schedule"] = in_force["schedule"]
    base["timezone"] = in_force["timezone"]
    base["days"] = in_force["days"] or "either"
    if schedule.relative or schedule.next_after(at) is None:
        return base | _answer("not_a_slot", f"{what} has no fixed slots: runs are not planned")
    if schedule.latest_at_or_before(at) != at:
        return base | _not_a_slot(conn, job_id, schedule, at, what)

    off = _off_at(changes, at)
    if off is not None:
        return base | off
    if at > now:
        pending = job.snapshot.tick_at
        text = f"{iso(at)} is a slot in the future; the next tick is at {iso(pending)}"
        return base | _answer("future", text, next_tick=iso(pending))
    if job.snapshot.tick_at is not None and job.snapshot.tick_at <= at:
        return base | _answer(
            "pending", f"the slot is due and its tick is pending ({iso(job.snapshot.tick_at)})"
        )
    return base | _answer(
        "missing",
        "no record of this slot: it was not run and not recorded (older than the job's "
        "records, or one of more than 1000 slots missed at once)",
    )


def _pruned(conn: Connection, job_id: int, at: datetime) -> dict[str, Any] | None:
    """A time in a day whose records retention dropped: what is known of it is the job's
    rollup of that day (none if it had no run)."""
    horizon = history_days.pruned_before(conn)
    if horizon is None or at >= horizon:
        return None
    day = at.astimezone(UTC).date()
    rolled = history_days.day_of(conn, job_id, day) or {}
    statuses = rolled.get("statuses", {})
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "no run"
    text = f"the records of {day} were pruned (CRONCHAIN_RETENTION); that day the job had {counts}"
    return _answer(
        "pruned",
        text,
        day=day.isoformat(),
        runs=rolled.get("runs", 0),
        statuses=statuses,
        reasons=rolled.get("reasons", {}),
        lag_p50=rolled.get("lag_p50"),
        lag_p95=rolled.get("lag_p95"),
        lag_p99=rolled.get("lag_p99"),
    )


def _with_alerts(answer: dict[str, Any], raised: list[AlertRow]) -> dict[str, Any]:
    """The alerts the slot raised, in the answer's text and as ``alerts``."""
    if not raised:
        return answer | {"alerts": []}
    said = "; ".join(
        f"{a.event} ({a.state}: {delivery_text(a.channels, a.delivered, a.state)})" for a in raised
    )
    text = f"{answer['text']}; it raised the alert(s) {said}"
    return answer | {"text": text, "alerts": [a.as_json() for a in raised]}


def _answer(code: str, text: str, **more: Any) -> dict[str, Any]:
    return {"answer": code, "text": text, **more}


def _ran(inv: dict[str, Any]) -> dict[str, Any]:
    fields = {
        "invocation": inv["id"],
        "status": inv["status"],
        "reason": inv["reason"],
        "error": inv["error"],
        "revision": inv["revision"],
        "backfill": inv["backfill"],
    }
    checks = inv.get("checks") or {}
    if "upstream" in checks:
        fields["upstreams"] = checks["upstream"]
    if gates.REASON in checks:
        fields["gates"] = checks[gates.REASON]["gates"]
    if inv["status"] == "SKIPPED":
        why = inv["error"] or meaning_of(inv["reason"])  # an unmet hold says what it missed
        return _answer("skipped", f"the slot was SKIPPED ({inv['reason']}): {why}", **fields)
    how = " by a backfill" if inv["backfill"] else ""
    if inv["status"] == "WAITING" and inv["reason"] == Reason.UPSTREAM:
        waiting = [c for c in checks.get("upstream", ()) if not c["met"]]
        text = (
            f"the slot's invocation {inv['id']} waits for its upstreams until"
            f" {iso(inv['deadline'])}: " + "; ".join(said(c) for c in waiting)
        )
        return _answer("waiting", text, deadline=iso(inv["deadline"]), **fields)
    if inv["status"] == "WAITING" and inv["reason"] == gates.REASON:
        state = checks[gates.REASON]
        text = (
            f"the slot's invocation {inv['id']} waits for its gates until"
            f" {iso(inv['deadline'])}: {gates.unmet_text(state)}"
        )
        return _answer("waiting", text, deadline=iso(inv["deadline"]), **fields)
    if inv["status"] == "WAITING" and inv["reason"] == Reason.POOL:
        full = checks.get("pool", {})
        holders = ", ".join(
            f"{h['job']} (invocation {h['invocation']})" for h in full.get("held_by", ())
        )
        text = (
            f"the slot's invocation {inv['id']} waits for a place in pool {inv['pool']}:"
            f" {full.get('taken')} of {full.get('size')} taken when it came"
            + (f", by {holders}" if holders else "")
        )
        return _answer("waiting", text, pool=full or {"name": inv["pool"]}, **fields)
    if inv["status"] in _UNDER_WAY:
        code, what = _UNDER_WAY[inv["status"]]
        whose = " (a backfill's)" if inv["backfill"] else ""
        return _answer(code, f"the slot's invocation {inv['id']}{whose} {what}", **fields)
    tail = f": {inv['error']}" if inv["error"] else ""
    text = f"the slot ran{how} as invocation {inv['id']}, {inv['status']}{tail}"
    return _answer("ran", text + _waited(checks), **fields)


def _waited(checks: dict[str, Any]) -> str:
    """What a run that ran had waited for, in words: a place, its gates, upstreams."""
    text = ""
    if checks.get("pool", {}).get("released_at"):
        full = checks["pool"]
        text += (
            f"; it waited for a place in pool {full['name']} from {full['since']} until"
            f" {full['released_at']}"
        )
    if checks.get(gates.REASON, {}).get("released_at"):
        state = checks[gates.REASON]
        passed = "; ".join(gates.said(g) for g in state["gates"])
        text += (
            f"; it waited for its gates from {state['since']} until"
            f" {state['released_at']}: {passed}"
        )
    if checks.get("released_at"):
        met = ", ".join(said(c) for c in checks["upstream"])
        text += (
            f"; it waited for its upstreams from {checks['held_at']} until"
            f" {checks['released_at']}: {met}"
        )
    return text


# An invocation that has not ended has not run yet: what it is doing instead.
_UNDER_WAY = {
    "WAITING": ("waiting", "waits for its turn (overlap policy, catch-up or backfill)"),
    "STARTING": ("running", "is starting (sent, or waiting for a retry)"),
    "RUNNING": ("running", "is running"),
}


def _not_a_slot(
    conn: Connection, job_id: int, schedule: Schedule, at: datetime, what: str
) -> dict[str, Any]:
    before, after = schedule.latest_at_or_before(at), schedule.next_after(at)
    nearest = []
    for slot in (before, after):
        if slot is None:
            continue
        inv = run_store.invocation_at(conn, job_id, slot)
        nearest.append(
            {"slot": iso(slot), "invocation": inv and inv["id"], "status": inv and inv["status"]}
        )
    text = f"{iso(at)} is not a slot of {what}; the nearest are " + " and ".join(
        f"{n['slot']} ({n['status'] or 'no invocation'})" for n in nearest
    )
    return _answer("not_a_slot", text, nearest=nearest)


def _off_at(changes: list[dict[str, Any]], at: datetime) -> dict[str, Any] | None:
    """Disabled or paused at ``at``, with since when and until when."""
    enabled = paused = False
    for change in changes:
        if change["at"] > at:
            break
        match change["change"]:
            case "enabled":
                enabled = True
            case "disabled":
                enabled = paused = False
            case "paused":
                paused = True
            case "resumed":
                paused = False
    if enabled and not paused:
        return None
    code = "disabled" if not enabled else "paused"
    before = [c for c in changes if c["at"] <= at and c["change"] in _START[code]]
    start = before[-1]
    end = next((c for c in changes if c["at"] > at and c["change"] in _END[code]), None)
    reason = f", reason: {start['reason']}" if start["reason"] else ""
    until = f" until {iso(end['at'])}" if end else " and still is"
    text = f"the job was {code} from {iso(start['at'])}{until}{reason}"
    return _answer(
        code,
        text,
        since=iso(start["at"]),
        until=iso(end["at"]) if end else None,
        reason=start["reason"],
    )


_START = {"disabled": ("created", "disabled"), "paused": ("paused",)}
_END = {"disabled": ("enabled",), "paused": ("resumed", "disabled")}
