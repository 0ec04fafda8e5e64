"""An ``every 10s`` job fired slot by slot from the tests' fixed start, and what each
slot's run came to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronchain.scheduler.engine import Engine
from tests.support.deliver import deliver_starts, deliver_ticks
from tests.support.engine import Clock, RecordingPort
from tests.support.rows import rows

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # the fixed clock's start


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def settle_starts(engine: Engine, port: RecordingPort) -> None:
    """Deliver every start (and the starts they cause) now; ticks stay queued."""
    while port.starts:
        deliver_starts(engine, port)


def history(engine: Engine) -> list[tuple[int, str, str | None]]:
    """(seconds after T0, status, reason) per slot, oldest slot first."""
    found = [r for r in rows(engine) if r["slot"] is not None]
    found.sort(key=lambda r: r["slot"])
    return [(int((r["slot"] - T0).total_seconds()), r["status"], r["reason"]) for r in found]


def run_until(engine: Engine, port: RecordingPort, clock: Clock, seconds: float) -> None:
    """Fire every slot on time up to ``seconds`` after T0."""
    while clock.now < at(seconds):
        clock.advance(10)
        deliver_ticks(engine, port)
        settle_starts(engine, port)
