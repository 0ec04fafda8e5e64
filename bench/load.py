"""The benchmarks' load: where in its period each of N jobs fires."""

from __future__ import annotations

import math


def offset(i: int, jobs: int, period: float, step: float = 0) -> float:
    """Seconds past each multiple of ``period`` at which job ``i`` fires: spread evenly
    at millisecond resolution, or with ``step`` on its multiples, as cron jobs fire on
    whole seconds (``step`` 1) and share instants. Always under ``period``, however many
    jobs share it (rounded to the nearest millisecond, the last of 48,000 jobs in 20 s
    fell on the period itself, which no schedule may have as its offset)."""
    spread = math.floor(i * period * 1000 / jobs) / 1000
    return math.floor(spread / step) * step if step else spread
