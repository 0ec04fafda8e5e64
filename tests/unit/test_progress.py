"""The progress bar of long commands (issue 18): what its line says, when it is drawn,
and that nothing is drawn off a terminal or for a short stage."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from cronchain.scheduler import progress
from cronchain.scheduler.progress import CLEAR, MIN_ITEMS, Bar, render


@pytest.mark.parametrize(
    ("done", "total", "elapsed", "line"),
    [
        (0, 100_000, 0.0, "apply p: writing  0/100,000 jobs  0%"),
        (45_000, 100_000, 3.6, "apply p: writing  45,000/100,000 jobs  45%  12,500/s"),
        (99_999, 100_000, 10.0, "apply p: writing  99,999/100,000 jobs  99%  10,000/s"),
        (100_000, 100_000, 8.0, "apply p: writing  100,000/100,000 jobs  100%  12,500/s"),
        (10, 0, 1.0, "apply p: writing  10/0 jobs  100%  10/s"),
    ],
)
def test_the_line_says_how_many_of_how_many_the_percent_and_the_rate(
    done: int, total: int, elapsed: float, line: str
):
    assert render("apply p: writing", done, total, "jobs", elapsed, width=200) == line


def test_the_line_is_cut_to_the_terminal_less_a_column():
    line = render("apply a-very-long-project-name: writing", 5, 10, "jobs", 1.0, width=20)
    assert line == "apply a-very-long-p"
    assert render("x", 1, 2, "jobs", 1.0, width=0) == ""


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_draws_in_place_at_most_every_redraw_interval_and_erases_itself():
    stream, clock = Terminal(), Clock()
    bar = Bar(stream, clock, width=80)
    bar.start("backfill p/j", 2000, "slots")
    assert stream.getvalue() == CLEAR + "backfill p/j  0/2,000 slots  0%"
    bar.advance(500)  # no time has passed: not drawn again
    assert stream.getvalue().count(CLEAR) == 1
    clock.now += progress.REDRAW
    bar.advance(500)
    assert stream.getvalue().endswith(CLEAR + "backfill p/j  1,000/2,000 slots  50%  10,000/s")
    bar.advance(1000)  # done: drawn at once, whatever the time
    assert stream.getvalue().endswith("2,000/2,000 slots  100%  20,000/s")
    bar.end()
    assert stream.getvalue().endswith(CLEAR)


def test_a_stage_draws_only_on_a_terminal_and_for_enough_items():
    for stream, total, drawn in [
        (io.StringIO(), MIN_ITEMS, False),  # a pipe, a file: never
        (Terminal(), MIN_ITEMS - 1, False),  # a moment's work: no bar
        (Terminal(), MIN_ITEMS, True),
    ]:
        with progress.drawing(stream), progress.stage("apply p: checking", total) as advance:
            advance(total)
        assert bool(stream.getvalue()) is drawn, (type(stream).__name__, total)


def test_outside_a_command_that_draws_a_stage_draws_nothing():
    with progress.stage("apply p: checking", 10 * MIN_ITEMS) as advance:
        assert advance is progress.ignore


def test_a_stream_that_cannot_say_is_no_terminal():
    class Closed(io.StringIO):
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    assert not progress.shown(Closed())
    assert not progress.shown(object())  # type: ignore[arg-type]
    assert progress.shown(Terminal())


def test_a_stage_that_fails_still_erases_its_line():
    stream = Terminal()
    with (
        pytest.raises(RuntimeError),
        progress.drawing(stream),
        progress.stage("apply p: writing", MIN_ITEMS),
    ):
        raise RuntimeError("the database went away")
    assert stream.getvalue().endswith(CLEAR)
