"""A job's last runs as two bar charts, drawn here as SVG: what each run took, and how
late its first attempt started after its slot; and the forecast's heat strip.

Drawn on the server, in a few lines, rather than by a charting library: the page loads
nothing from elsewhere (its Content-Security-Policy says so), the chart needs no
script, and it costs one query the page already makes the like of. Each bar is a link
to its run's page, with its figures in its title; the chart's own title says the
median and the largest, so that a reader without sight of it has them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from markupsafe import Markup, escape

from cronchain.scheduler.queries.forecast import Cell
from cronchain.scheduler.storage.pages import Timing
from cronchain.scheduler.web.jobview import took
from cronchain.scheduler.web.zones import local_text, zone_of

WIDTH, HEIGHT = 600, 120  # the drawing's own units; the page scales it to its width
AXIS = 64  # room on the left for the scale's labels
PLACES = 30  # the fewest bars' places: a job's first runs are drawn as bars, not blocks


@dataclass(frozen=True)
class Chart:
    """One measure of the last runs: ``svg`` to draw, ``summary`` to read."""

    name: str
    svg: Markup
    summary: str


def charts(timings: Sequence[Timing], zone: str, link: Callable[[int], str]) -> list[Chart]:
    """The duration and start-lag charts of ``timings`` (newest first, as read), the
    newest on the right; ``link`` gives a run's page. A measure no run has yet is left
    out."""
    runs = list(reversed(timings))
    measures = (
        ("took", "what the last attempt took", lambda t: _seconds(t.started_at, t.finished_at)),
        (
            "lag",
            "how late the first attempt started after the slot (or the trigger)",
            lambda t: _seconds(t.due, t.first_started_at),
        ),
    )
    drawn = []
    for name, what, measure in measures:
        values = [measure(t) for t in runs]
        if any(v is not None for v in values):
            drawn.append(_chart(name, what, runs, values, zone, link))
    return drawn


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    """Clocks of two hosts may put an end a little before its start: that reads 0."""
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def _chart(
    name: str,
    what: str,
    runs: list[Timing],
    values: list[float | None],
    zone_name: str,
    link: Callable[[int], str],
) -> Chart:
    known = [v for v in values if v is not None]
    top = nice_ceiling(max(known))
    zone = zone_of(zone_name)
    step = (WIDTH - AXIS) / max(len(runs), PLACES)
    first = WIDTH - step * len(runs)  # the newest run at the right edge, as time reads
    bars = []
    for i, (run, value) in enumerate(zip(runs, values, strict=True)):
        if value is None:
            continue
        height = max(1.0, (HEIGHT - 2) * value / top)
        title = f"run {run.id}, {local_text(run.due, zone)}: {took(value)}, {run.status}"
        # Out of the keyboard's way (tabindex -1): the history's table links each run too.
        bars.append(
            f'<a href="{escape(link(run.id))}" tabindex="-1"><title>{escape(title)}</title>'
            f'<rect class="s-{escape(run.status)}"'
            f' x="{first + i * step + step * 0.1:.1f}" y="{HEIGHT - height:.1f}"'
            f' width="{step * 0.8:.1f}" height="{height:.1f}"/></a>'
        )
    summary = (
        f"{what.capitalize()}, {len(known)} of the last {len(runs)} runs:"
        f" median {took(median(known))}, largest {took(max(known))}"
    )
    svg = (
        f'<svg class="chart chart-{name}" viewBox="0 0 {WIDTH} {HEIGHT + 14}"'
        f' role="group" aria-labelledby="chart-{name}-says">'
        f'<line class="axis" x1="{AXIS}" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}"/>'
        f'<line class="grid" x1="{AXIS}" y1="1" x2="{WIDTH}" y2="1"/>'
        f'<text x="{AXIS - 4}" y="12" text-anchor="end">{escape(round_label(top))}</text>'
        f'<text x="{AXIS - 4}" y="{HEIGHT}" text-anchor="end">0</text>'
        f'<text x="{WIDTH}" y="{HEIGHT + 13}" text-anchor="end">newest</text>'
        f"{''.join(bars)}</svg>"
    )
    return Chart(name, Markup(svg), summary)


def round_label(seconds: float) -> str:
    """A round figure of ``nice_ceiling`` in its one unit: 500 ms, 5 s, 15 min, 6 h, 2 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds * 1000:g} ms"


def nice_ceiling(value: float) -> float:
    """The scale's top: the least round figure at least ``value``, so that its label
    reads round: 1, 2 or 5 times a power of ten under a minute (a millisecond for a
    chart of zeros), then whole minutes, hours and days a clock face divides by."""
    for top in _ROUND:
        if value <= top * (1 + 1e-9):
            return top
    days = value / 86400
    power = 10 ** math.floor(math.log10(days))
    return 86400 * power * next(f for f in (1, 2, 5, 10) if days <= f * power * (1 + 1e-9))


_ROUND = (
    *(f * 10.0**k for k in range(-3, 2) for f in (1, 2, 5)),  # 1 ms to 50 s
    *(60.0 * m for m in (1, 2, 5, 10, 15, 30, 60)),
    *(3600.0 * h for h in (2, 3, 6, 12, 24)),
    *(86400.0 * d for d in (2, 5)),
)


STRIP_HEIGHT = 40
LEVELS = (0.1, 0.5, 1.0)  # a cell's peak against the threshold: its shade's bounds


def heat_strip(cells: Sequence[Cell], threshold: int) -> Markup:
    """The forecast's cells side by side, each shaded by its busiest second against the
    herd threshold (four shades, the last a herd's, which is also drawn taller), with its
    figures in its title."""
    step = WIDTH / max(1, len(cells))
    drawn = []
    for i, cell in enumerate(cells):
        level = 0 if cell.peak == 0 else 1 + sum(cell.peak >= f * threshold for f in LEVELS)
        top = 0 if level == 4 else 8
        title = (
            f"{cell.start:%Y-%m-%d %H:%M} UTC: {cell.fires:,} fires,"
            f" at most {cell.peak:,} in one second"
        )
        drawn.append(
            f'<rect class="h{level}" x="{i * step:.1f}" y="{top}" width="{step:.1f}"'
            f' height="{STRIP_HEIGHT - top}"><title>{escape(title)}</title></rect>'
        )
    days = len(cells) > 1 and cells[-1].start - cells[0].start >= timedelta(days=1)
    shape = "%m-%d %H:%M" if days else "%H:%M"
    labels = [
        f'<text x="{i * step:.1f}" y="{STRIP_HEIGHT + 13}">{cell.start.strftime(shape)}</text>'
        for i, cell in enumerate(cells)
        if i % max(1, len(cells) // 6) == 0
    ]
    return Markup(
        f'<svg class="heat" viewBox="0 0 {WIDTH} {STRIP_HEIGHT + 16}" role="img"'
        f' aria-labelledby="heat-says">{"".join(drawn)}{"".join(labels)}</svg>'
    )
