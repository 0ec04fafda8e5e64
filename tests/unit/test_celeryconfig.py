"""What celeryconfig promises the watchdog."""

from __future__ import annotations

import importlib


def test_watchdog_runs_never_expire_in_the_queue() -> None:
    """A repair wave deeper than an interval would expire every watchdog run sent
    meanwhile (bench.repair saw four of seven expire), starving the repairs it needs."""
    config = importlib.import_module("celeryconfig")
    entry = config.beat_schedule["cronchain-watchdog"]
    assert entry["task"] == "cronchain.watchdog"
    assert "expires" not in entry.get("options", {})
