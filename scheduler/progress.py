"""How far a long command has got, drawn as one line on a terminal.

Code that works through many items says how far it got, much as it would log::

    with progress.stage("apply demo: writing", len(rows), "jobs") as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))

Nothing is drawn unless the command installed a bar with :func:`drawing` and the stage
has :data:`MIN_ITEMS` items or more. ``cronchain apply`` and ``backfill`` install one on
stderr, which draws only when stderr is a terminal: scripts, tests, pipes and log files
see nothing. A context variable carries the bar, so that the code doing the work needs
no parameter for it, and the API between the two (``Scheduler``) stays as it is.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

MIN_ITEMS = 1000  # fewer take a moment: no bar
REDRAW = 0.1  # seconds between two drawings of the line
CLEAR = "\r\x1b[K"  # back to the line's start, and erase it

Advance = Callable[[int], None]


def ignore(count: int) -> None:
    """An ``advance`` that draws nothing."""


def render(label: str, done: int, total: int, unit: str, elapsed: float, width: int = 80) -> str:
    """The line: ``apply demo: writing  45,000/100,000 jobs  45%  12,345/s``, cut to
    ``width`` less one column (a full line would wrap on some terminals)."""
    percent = 100 * done // total if total else 100
    rate = f"  {done / elapsed:,.0f}/s" if done and elapsed > 0 else ""
    return f"{label}  {done:,}/{total:,} {unit}  {percent}%{rate}"[: max(width - 1, 0)]


class Bar:
    """One stage at a time, drawn on one line of ``stream``: redrawn in place at most
    every :data:`REDRAW` seconds (and when the stage is done), erased when the stage
    ends, so that whatever the command prints next starts on a clean line."""

    def __init__(
        self,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
        width: int | None = None,
    ):
        self.stream = stream
        self.clock = clock
        self.width = width or shutil.get_terminal_size().columns
        self.label, self.total, self.unit = "", 0, ""
        self.done, self.started, self.drawn = 0, 0.0, -math.inf

    def start(self, label: str, total: int, unit: str) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done, self.started, self.drawn = 0, self.clock(), -math.inf
        self._draw(self.started)

    def advance(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.drawn >= REDRAW or self.done >= self.total:
            self._draw(now)

    def end(self) -> None:
        self.stream.write(CLEAR)
        self.stream.flush()

    def _draw(self, now: float) -> None:
        self.drawn = now
        line = render(self.label, self.done, self.total, self.unit, now - self.started, self.width)
        self.stream.write(CLEAR + line)
        self.stream.flush()


_bar: ContextVar[Bar | None] = ContextVar("cronchain_progress_bar", default=None)


def shown(stream: TextIO) -> bool:
    """Whether a bar on ``stream`` is drawn: on a terminal only."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method; a closed stream
        return False


@contextmanager
def drawing(stream: TextIO, bar: Bar | None = None) -> Iterator[None]:
    """Draw the stages run in this block on ``stream`` if it is a terminal (or with
    ``bar``, always: for tests)."""
    if bar is None and shown(stream):
        bar = Bar(stream)
    token = _bar.set(bar)
    try:
        yield
    finally:
        _bar.reset(token)


@contextmanager
def stage(label: str, total: int, unit: str = "items") -> Iterator[Advance]:
    """A stage of ``total`` items: yields the function to call as items are done. It
    draws only inside :func:`drawing` on a terminal, for :data:`MIN_ITEMS` or more."""
    bar = _bar.get()
    if bar is None or total < MIN_ITEMS:
        yield ignore
        return
    bar.start(label, total, unit)
    try:
        yield bar.advance
    finally:
        bar.end()
