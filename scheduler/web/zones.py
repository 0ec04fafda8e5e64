"""Times as the page shows them: in the job's own zone, with its DST transitions marked.

An operator reads "09:00 Europe/Paris", not a UTC instant, and the surprises of a
zone's clock come at its DST transitions: a slot between 02:00 and 03:00 on a spring
night fires at 03:00, one at 02:30 on an autumn night fires once (at the first 02:30),
and the gap between two slots is an hour shorter or longer. So next to a next tick the
page shows the zone's next transition when it falls *before* that tick (the tick's
distance from now is not what the wall clocks suggest), or when it comes within
``SOON`` of now (the coming slots are the ones it touches); and it says when the tick's
wall time is one the clocks show twice.

Pure functions of (instant, zone, now): the transitions come from
``scheduler.timing.localtime``; a zone's next transition is searched once per zone and
hour, not once per job.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.timing.localtime import Transition, fold_occurrence, transitions

SOON = timedelta(days=7)  # a transition this close is shown even after the next tick
HORIZON = timedelta(days=400)  # how far ahead a zone's next transition is looked for


@dataclass(frozen=True)
class Shown:
    """An instant in a job's zone: ``text`` (``2026-03-29 03:00 CEST``), ``offset``
    (``+02:00``), ``utc`` (ISO 8601, for a title), and the DST note, if any."""

    text: str
    offset: str
    utc: str
    dst: str | None = None
    dst_before: bool = False  # the transition falls between now and this instant


def offset_text(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def zone_of(name: str) -> ZoneInfo:
    """The stored zone (validated when the job was applied); UTC if the machine's zone
    data no longer has it, so that one job cannot break the page."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def shown(t: datetime, zone_name: str) -> Shown:
    """``t`` in the zone, without a DST note; in whole seconds, as the page writes every
    time (HTML's ``datetime`` takes three digits of a second at most)."""
    t = t.replace(microsecond=0)
    local = t.astimezone(zone_of(zone_name))
    return Shown(
        text=local_text(t, zone_of(zone_name)),
        offset=offset_text(local.utcoffset() or timedelta(0)),
        utc=iso(t.astimezone(UTC)),
    )


def local_text(t: datetime, zone: ZoneInfo) -> str:
    """``t`` as ``shown`` writes it, alone: the page writes 6,000 of these (its strips'
    titles), and ``strftime`` was half of the page's time."""
    local = t.astimezone(zone)
    return f"{local.isoformat(' ', 'seconds')[:19]} {local.tzname() or ''}".rstrip()


def next_tick(t: datetime, zone_name: str, now: datetime) -> Shown:
    """A pending tick in its zone, with the DST note the module's docstring describes."""
    base = shown(t, zone_name)
    zone = zone_of(zone_name)
    notes = []
    crossing = next_transition(zone_name, now)
    before = crossing is not None and now < crossing.at <= t
    if crossing is not None and (before or crossing.at - now <= SOON):
        where = "before this tick" if before else "after this tick"
        notes.append(f"DST: {_moves(crossing, zone_name)}, {where}")
    fold, length = fold_occurrence(t, zone)
    if length:
        which = "first" if fold == 0 else "second"
        notes.append(f"this wall time occurs twice; this is the {which}")
    return Shown(base.text, base.offset, base.utc, "; ".join(notes) or None, dst_before=before)


def dst_notes(start: datetime, end: datetime, zone_name: str) -> list[tuple[datetime, str]]:
    """The zone's transitions in ``(start, end]`` (at most ``HORIZON`` ahead of start),
    each with its text, for a timeline of slots."""
    end = min(end, start + HORIZON)
    return [
        (c.at, f"DST: {_moves(c, zone_name)}") for c in transitions(start, end, zone_of(zone_name))
    ]


def _moves(c: Transition, zone_name: str) -> str:
    """``clocks go back 1 h on 2026-10-25: 03:00 CEST becomes 02:00 CET``."""
    step = c.after - c.before
    way = "forward" if step > timedelta(0) else "back"
    old = c.at.astimezone(timezone(c.before))
    new = c.at.astimezone(zone_of(zone_name))
    name = (c.at - timedelta(seconds=1)).astimezone(zone_of(zone_name)).tzname()
    return (
        f"clocks go {way} {abs(step.total_seconds()) / 3600:g} h on {new:%Y-%m-%d}:"
        f" {old:%H:%M} {name} becomes {new:%H:%M} {new.tzname()}"
    )


def next_transition(zone_name: str, now: datetime) -> Transition | None:
    """The zone's first transition after ``now`` within ``HORIZON``; searched once per
    zone and hour (from the hour's start), then checked against ``now``."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    found = _first_transition(zone_name, hour)
    if found is not None and found.at <= now:  # it passed within this hour
        later = transitions(found.at, found.at + HORIZON, zone_of(zone_name))
        return later[0] if later else None
    return found


@functools.lru_cache(maxsize=1024)
def _first_transition(zone_name: str, start: datetime) -> Transition | None:
    found = transitions(start, start + HORIZON, zone_of(zone_name))
    return found[0] if found else None
