"""One run as its own page shows it: each attempt, with the worker that ran it, what it
took and how it ended, and what the run waited for before it could start (its
upstreams, its gates' answers, a place in its pool).

It reads what ``cronchain history --invocation`` prints, from the same row: the earlier
attempts a retry keeps (``invocations.attempts``), the last one in the row's own
columns, and what each hold recorded in ``checks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronchain.scheduler.storage.pages import RunDetail
from cronchain.scheduler.web.jobview import Moment, moment, scrub, took
from cronchain.scheduler.workflows import gates, pools, upstream


@dataclass(frozen=True)
class AttemptLine:
    """An attempt: ``note`` is its reason and error, as its run recorded them."""

    attempt: int
    status: str
    worker: str | None
    started: Moment | None
    finished: Moment | None
    took: str
    note: str | None


@dataclass(frozen=True)
class Wait:
    """What a run waited for before it could start: since when, how the wait ended
    (``until``, in words), and what each thing it waited for said (``lines``)."""

    what: str
    since: Moment | None
    until: str
    lines: list[str]


def attempts(run: RunDetail, zone: str, now: datetime) -> list[AttemptLine]:
    """Every attempt, first to last: the earlier ones as a retry recorded them, then the
    row's own, unless it is the last recorded one (a run that waits for its retry)."""
    lines = [_recorded(record, zone, now) for record in run.attempts or []]
    if run.attempt >= 1 and all(line.attempt != run.attempt for line in lines):
        lines.append(
            AttemptLine(
                run.attempt,
                run.status,
                run.worker,
                moment(run.started_at, zone, now),
                moment(run.finished_at, zone, now),
                _took(run.started_at, run.finished_at, now, running=run.status == "RUNNING"),
                _note(run.reason, run.error),
            )
        )
    return lines


def _recorded(record: dict[str, Any], zone: str, now: datetime) -> AttemptLine:
    started, finished = _time(record.get("started_at")), _time(record.get("finished_at"))
    return AttemptLine(
        int(record["attempt"]),
        str(record["status"]),
        record.get("worker"),
        moment(started, zone, now),
        moment(finished, zone, now),
        _took(started, finished, now, running=False),
        _note(record.get("reason"), record.get("error")),
    )


def _took(start: datetime | None, end: datetime | None, now: datetime, *, running: bool) -> str:
    if start is not None and end is not None:
        return took((end - start).total_seconds())
    if start is not None and running:
        return took((now - start).total_seconds()) + " so far"
    return ""


def _note(reason: str | None, error: str | None) -> str | None:
    text = ": ".join(part for part in (reason, scrub(error)) if part)
    return text or None


def waits(run: RunDetail, zone: str, now: datetime) -> list[Wait]:
    """The holds the run met, in the order they hold a run: upstreams, gates, pool."""
    checks = run.checks or {}
    found = []
    if checks.get("held_at"):
        lines = [upstream.said(check) for check in checks.get("upstream", ())]
        found.append(_wait("its upstreams", checks, "held_at", run, zone, now, lines))
    if gates.REASON in checks:
        state = checks[gates.REASON]
        lines = [
            line
            for gate in state.get("gates", ())
            for line in [
                f"gate {gate['name']}, check {a['check']} at {a['at']}:"
                f" {'yes' if a['yes'] else 'no'}, {a['said']}"
                for a in gate["answers"]
            ]
            or [gates.said(gate)]
        ]
        found.append(_wait("its gates", state, "since", run, zone, now, lines))
    if pools.REASON in checks:
        place = checks[pools.REASON]
        what = f"a place in pool {place.get('name', '')}"
        found.append(_wait(what, place, "since", run, zone, now, []))
    return found


def _wait(
    what: str,
    state: dict[str, Any],
    since_key: str,
    run: RunDetail,
    zone: str,
    now: datetime,
    lines: list[str],
) -> Wait:
    since = _time(state.get(since_key))
    released = _time(state.get("released_at"))
    if released is not None:
        waited = f" after {took((released - since).total_seconds())}" if since else ""
        until = f"released{waited}"
    elif run.status == "WAITING":
        until = "still waiting"
    elif run.started_at is not None:
        until = "not met: started anyway (on_unmet: run)"
    else:
        until = f"not met: {run.status}"
    return Wait(what, moment(since, zone, now), until, [scrub(line) or "" for line in lines])


def _time(text: Any) -> datetime | None:
    """A time as a hold or a retry recorded it (ISO 8601 with its offset, or Z)."""
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
