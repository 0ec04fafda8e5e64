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
from cronchain.scheduler.timing.iso import parsed
from cronchain.scheduler.web.jobview import Moment, moment, scrub, took_of
from cronchain.scheduler.workflows import gates, pools, upstream
from cronchain.scheduler.workflows.unmet import unreleased


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
                took_of(run.started_at, run.finished_at, now, running=run.status == "RUNNING"),
                _note(run.reason, run.error),
            )
        )
    return lines


def _recorded(record: dict[str, Any], zone: str, now: datetime) -> AttemptLine:
    started, finished = parsed(record.get("started_at")), parsed(record.get("finished_at"))
    return AttemptLine(
        int(record["attempt"]),
        str(record["status"]),
        record.get("worker"),
        moment(started, zone, now),
        moment(finished, zone, now),
        took_of(started, finished, now, running=False),
        _note(record.get("reason"), record.get("error")),
    )


def _note(reason: str | None, error: str | None) -> str | None:
    text = ": ".join(part for part in (reason, scrub(error)) if part)
    return text or None


def waits(run: RunDetail, zone: str, now: datetime) -> list[Wait]:
    """The holds the run met, in the order they hold a run: upstreams, gates, pool."""
    checks = run.checks or {}
    found = []
    if checks.get("held_at"):
        recorded = checks.get(upstream.REASON, ())
        met = all(check.get("met") for check in recorded)
        lines = [upstream.said(check) for check in recorded]
        found.append(_wait(upstream.REASON, checks, "held_at", run, zone, now, lines, met))
    if gates.REASON in checks:
        state = checks[gates.REASON]
        lines = [line for gate in state.get("gates", ()) for line in gates.answers_said(gate)]
        found.append(_wait(gates.REASON, state, "since", run, zone, now, lines))
    if pools.REASON in checks:
        place = checks[pools.REASON]
        found.append(_wait(pools.REASON, place, "since", run, zone, now, [], pool=place))
    return found


_WHAT = {upstream.REASON: "its upstreams", gates.REASON: "its gates"}


def _wait(
    hold: str,
    state: dict[str, Any],
    since_key: str,
    run: RunDetail,
    zone: str,
    now: datetime,
    lines: list[str],
    met: bool = True,
    pool: dict[str, Any] | None = None,
) -> Wait:
    """``met``: what was waited for was there when the wait ended (an upstream wait
    ended by ``max_wait`` and ``on_unmet: run`` records a release too)."""
    since, released = parsed(state.get(since_key)), parsed(state.get("released_at"))
    if released is not None and met:
        until = "released" + (f" after {took_of(since, released, now)}" if since else "")
    elif released is not None:
        until = "not met; started anyway (on_unmet: run)"
    else:
        until = unreleased(hold, run.status, run.reason, run.started_at is not None)
    what = f"a place in pool {pool.get('name', '')}" if pool is not None else _WHAT[hold]
    return Wait(what, moment(since, zone, now), until, [scrub(line) or "" for line in lines])
