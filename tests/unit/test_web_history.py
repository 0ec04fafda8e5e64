"""A run as the job page's history reads it: durations and times ago in words a person
reads, and what a row says of a run that runs, waits to be retried or never started."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronchain.scheduler.storage.pages import Run
from cronchain.scheduler.web import jobview

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.85, "850 ms"), (0.9996, "1.0 s"), (12.34, "12.3 s"), (59.96, "1 min 00 s"),
     (245, "4 min 05 s"), (7380, "2 h 03 min"), (273600, "3 d 04 h"), (-1, "0 ms")],
)  # fmt: skip
def test_a_duration_reads_in_its_largest_units(seconds: float, text: str) -> None:
    assert jobview.took(seconds) == text


def test_a_moment_reads_as_how_long_ago() -> None:
    seconds = (-3600, -0.5, 0.5, 12, 300, 7200, 200000)
    ago = [jobview.ago(NOW - timedelta(seconds=s), NOW) for s in seconds]
    assert ago == ["just now"] * 3 + ["12 s ago", "5 min ago", "2 h ago", "2 d ago"]


def run(status: str, started: float | None, finished: float | None, attempt: int) -> Run:
    """A run ``started`` and ``finished`` seconds before NOW (None: not)."""
    at = {k: None if v is None else NOW - timedelta(seconds=v) for k, v in
          (("started_at", started), ("finished_at", finished))}  # fmt: skip
    return Run(1, NOW, None, status, None, None, NOW, attempt, backfill=False, **at)


def test_a_running_run_took_so_far_and_one_waiting_for_its_retry_nothing() -> None:
    running = jobview.history_line(run("RUNNING", 12.5, None, 1), "UTC", NOW)
    assert running.took == "12.5 s so far" and running.finished is None
    # A failed attempt's start stays on the run while it waits to be retried.
    retrying = jobview.history_line(run("STARTING", 60, None, 2), "UTC", NOW)
    assert retrying.took == "" and retrying.started is not None and retrying.attempt == 2


def test_a_run_that_never_started_shows_only_its_end() -> None:
    skipped = jobview.history_line(run("SKIPPED", None, 0, 0), "UTC", NOW)
    assert skipped.started is None and skipped.took == "" and skipped.attempt == 0
    assert skipped.finished is not None and skipped.finished.ago == "just now"


def test_a_run_waiting_for_its_retry_says_when_and_which_attempt() -> None:
    waiting = Run(1, NOW, None, "STARTING", "error", "boom", NOW, 1,
                  start_at=NOW + timedelta(seconds=10))  # fmt: skip
    assert jobview.retrying(waiting, NOW, 3) == "retrying in 10 s (2/3)"
    line = jobview.history_line(waiting, "UTC", NOW, max_attempts=3)
    assert line.note == "retrying in 10 s (2/3): boom"
    late = Run(1, NOW, None, "STARTING", "error", "boom", NOW, 1, start_at=NOW)
    assert jobview.retrying(late, NOW, 3) == "retry due now (2/3)"  # not yet sent again
    first = Run(1, NOW, None, "STARTING", None, None, NOW, 0, start_at=NOW)
    assert jobview.retrying(first, NOW, 3) is None  # its first attempt, not a retry
    assert jobview.retrying(run("RUNNING", 1, None, 2), NOW, 3) is None
