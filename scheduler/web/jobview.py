"""One job as its page shows it: the spec without its secrets, and the slot timeline.

The timeline reads the job's newest runs (from the history) and computes its next
slots from its schedule, from the pending tick on, as the machine will: past slots
with their outcome and reason, the slots to come, and the zone's DST transitions among
them. Skip and wait reasons are told in words (the same words as ``explain``'s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import yaml

from cronchain.scheduler.spec import controls
from cronchain.scheduler.spec.model import NoopOptions
from cronchain.scheduler.storage.alert_store import AlertRow, delivery_text
from cronchain.scheduler.storage.pages import Run
from cronchain.scheduler.timing.schedules import stored_schedule
from cronchain.scheduler.web.zones import Shown, dst_notes, shown
from cronchain.statemachine.reasons import meaning_of

UPCOMING = 10  # next slots the timeline shows


@dataclass(frozen=True)
class Row:
    """A line of the timeline: ``kind`` is ``run`` (a recorded slot or trigger),
    ``next`` (a slot to come) or ``dst`` (a transition of the zone's clocks)."""

    kind: str
    when: Shown
    status: str = ""
    reason: str | None = None
    note: str | None = None
    run: int | None = None


# A URL's query string, which may hold a token the job's author put there: the page
# hides it wherever it shows a URL (the spec and the errors runs recorded).
_QUERY = re.compile(r"(https?://[^\s?#]+)\?[^\s#]*")


def scrub(text: str | None) -> str | None:
    """``text`` with every URL's query string hidden."""
    if not text or "?" not in text:
        return text
    return _QUERY.sub(r"\1?(query hidden)", text)


def reason_text(run: Run) -> str | None:
    """Why a run was skipped or waits: its error where a hold left one (what was not
    met), else what its reason means."""
    if run.error:
        return scrub(run.error)
    return None if run.reason is None else meaning_of(run.reason)


def run_row(run: Run, zone: str, retry: str | None = None) -> Row:
    """``retry``: what a run waiting for its retry says first (``retrying``)."""
    when = shown(run.slot or run.created_at, zone)
    note = reason_text(run) if run.status in ("SKIPPED", "WAITING") else scrub(run.error)
    if retry is not None:  # its last attempt's error follows what comes next
        note = retry + (f": {note}" if note else "")
    if run.slot is None:
        note = "triggered" + (f": {note}" if note else "")
    elif run.backfill:
        note = "backfill" + (f": {note}" if note else "")
    return Row("run", when, run.status, run.reason, note, run.id)


@dataclass(frozen=True)
class Moment:
    """When a run started or ended: ``ago`` (``5 min ago``) as the row says it, ``at``
    exactly, in the job's zone and in UTC, for a title."""

    ago: str
    at: Shown


@dataclass(frozen=True)
class HistoryLine:
    """A run as the job's history lists it: its slot (or when a triggered run was made),
    when its last attempt started and when the run ended, what that attempt took (so
    far, while it runs), and the number of its attempt."""

    run: int
    when: Shown
    status: str
    note: str | None
    attempt: int
    started: Moment | None
    finished: Moment | None
    took: str


def retrying(run: Run, now: datetime, max_attempts: int) -> str | None:
    """What a run waiting for its retry says: ``retrying in 10 s (2/3)``, the attempt it
    waits to make of the most it may; None for any other run."""
    if run.status != "STARTING" or run.attempt < 1 or run.start_at is None:
        return None
    due = due_in(run.start_at, now)
    which = f"({run.attempt + 1}/{max_attempts})"
    return f"retry due now {which}" if due == "due now" else f"retrying {due} {which}"


def history_line(run: Run, zone: str, now: datetime, max_attempts: int = 1) -> HistoryLine:
    """``now`` is the page's one instant, so that every row's "ago" counts from it;
    ``max_attempts``: the job's, for a run that waits to be retried."""
    row = run_row(run, zone, retrying(run, now, max_attempts))
    started = moment(run.started_at, zone, now)
    finished = moment(run.finished_at, zone, now)
    took_text = took_of(run.started_at, run.finished_at, now, running=run.status == "RUNNING")
    return HistoryLine(
        run.id, row.when, run.status, row.note, run.attempt, started, finished, took_text
    )


def took_of(
    start: datetime | None, end: datetime | None, now: datetime, *, running: bool = False
) -> str:
    """What an attempt took from ``start`` to ``end``; while it is ``running``, so far.
    Nothing for one that has not ended and does not run (a run waiting to be retried
    keeps its last attempt's start)."""
    if start is not None and end is not None:
        return took((end - start).total_seconds())
    if start is not None and running:
        return took((now - start).total_seconds()) + " so far"
    return ""


def moment(t: datetime | None, zone: str, now: datetime) -> Moment | None:
    """In whole seconds: HTML's ``datetime`` takes at most three digits of a second, and
    a person reads none."""
    if t is None:
        return None
    t = t.replace(microsecond=0)  # "ago" counts whole seconds, as the exact time shows
    return Moment(ago(t, now), shown(t, zone))


def took(seconds: float) -> str:
    """A duration as a person reads it: 850 ms, 12.3 s, 4 min 05 s, 2 h 03 min, 3 d 04 h,
    each rounded before its unit is chosen (never "1000 ms" or "60.0 s"). Below zero (the
    clocks of two hosts) it is 0 ms."""
    seconds = max(0.0, seconds)
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def ago(t: datetime, now: datetime) -> str:
    """How long before ``now``, in its largest whole unit: 12 s ago, 5 min ago, 3 h ago,
    2 d ago. Under a second, or after ``now`` (the clock of the host that wrote it
    ahead of this one's), just now."""
    seconds = (now - t).total_seconds()
    return "just now" if seconds < 1 else f"{_span(seconds)} ago"


def due_in(t: datetime, now: datetime) -> str:
    """How long after ``now`` (in 12 s, in 5 min); "due now" once it is not after it (a
    retry due and not yet sent)."""
    seconds = (t - now).total_seconds()
    return "due now" if seconds < 1 else f"in {_span(seconds)}"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


@dataclass(frozen=True)
class AlertLine:
    """An alert as the job's page lists it: its slot, event, state and where it went."""

    when: Shown
    event: str
    state: str
    channels: str


def alert_row(alert: AlertRow, zone: str) -> AlertLine:
    went = delivery_text(alert.channels, alert.delivered, alert.state)
    return AlertLine(shown(alert.slot or alert.created_at, zone), alert.event, alert.state, went)


def timeline(
    recent: list[Run],
    *,
    schedule: str,
    zone: str,
    tick_at: datetime | None,
    paused: bool,
    days: str | None = None,
    now: datetime,
    max_attempts: int = 1,
) -> list[Row]:
    """``recent`` (newest first, as the history reads them) oldest first, then the next
    slots, with the zone's transitions between now and the last of them."""
    rows = [run_row(run, zone, retrying(run, now, max_attempts)) for run in reversed(recent)]
    upcoming = next_slots(schedule, zone, tick_at, days)
    if not upcoming:
        why = "paused: no tick until it is resumed" if paused else "no slot is planned"
        return [*rows, Row("next", shown(now, zone), "", None, why)]
    marks = [(t, Row("next", shown(t, zone), "planned")) for t in upcoming]
    marks += [
        (at, Row("dst", shown(at, zone), "", None, text))
        for at, text in dst_notes(now, upcoming[-1], zone)
    ]
    marks.sort(key=lambda m: m[0])
    return rows + [row for _, row in marks]


def next_slots(
    schedule: str, zone: str, tick_at: datetime | None, days: str | None = None
) -> list[datetime]:
    """The pending tick's slot and the ones after it, as the schedule computes them
    (a fixed delay or ``triggered`` job has only its pending tick, if any)."""
    if tick_at is None:
        return []
    slots = [tick_at]
    parsed = stored_schedule(schedule, zone, days)
    if parsed.relative:
        return slots
    while len(slots) < UPCOMING:
        nxt = parsed.next_after(slots[-1])
        if nxt is None:
            break
        slots.append(nxt)
    return slots


def spec_summary(spec: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    """The spec as (field, value) lines, without what may hold a secret: an ``http``
    job's query string, header values and body, a ``celery`` job's arguments."""
    lines = [
        ("kind", kind),
        ("schedule", str(spec.get("schedule", ""))),
        ("timezone", str(spec.get("timezone", ""))),
    ]
    if "days" in spec:
        lines.append(("days", str(spec["days"])))
    options = spec.get(kind)
    if isinstance(options, dict):
        lines += _target(kind, options)
    lines += [(key, _value(spec[key])) for key in controls.KEYS if key in spec]
    return lines


def _target(kind: str, options: dict[str, Any]) -> list[tuple[str, str]]:
    if kind == "http":
        url = urlsplit(str(options.get("url", "")))
        hidden = " (query hidden)" if url.query else ""
        shown_url = f"{url.scheme}://{url.hostname or ''}{_port(url.port)}{url.path}{hidden}"
        lines = [("http", f"{options.get('method', 'GET')} {shown_url}")]
        if options.get("headers"):
            lines.append(("headers", ", ".join(sorted(options["headers"])) + " (values hidden)"))
        if options.get("body") is not None:
            lines.append(("body", "(hidden)"))
        return lines
    if kind == "celery":
        hidden = " (arguments hidden)" if options.get("args") or options.get("kwargs") else ""
        return [
            ("celery", f"{options.get('task', '')} on queue {options.get('queue', '')}{hidden}")
        ]
    defaults = _OPTION_DEFAULTS.get(kind, {})
    written = {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}
    return [(kind, _value(written))]


# What a kind's options are when its job file gives none: the page leaves them out, so a
# spec reads as it was written (``noop: {}``), not as the models fill it in.
_OPTION_DEFAULTS = {"noop": NoopOptions().normalized()}


def _port(port: int | None) -> str:
    return "" if port is None else f":{port}"


def _value(value: Any) -> str:
    """A spec's value as a job file writes it: YAML, a mapping or a list on one line
    (``{max_attempts: 3, backoff: 30}``), never Python's repr."""
    if isinstance(value, dict | list | tuple):
        flow = yaml.safe_dump(
            value, default_flow_style=True, sort_keys=False, width=10**6, allow_unicode=True
        )
        return flow.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
