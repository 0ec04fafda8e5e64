"""Tasks for the ``celery`` job kind's end-to-end tests (imported via CRONCHAIN_IMPORTS)."""

import os
import time
from pathlib import Path

from cronchain.tasks import app


@app.task(name="sample.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="sample.boom")
def boom() -> None:
    raise RuntimeError("boom")


@app.task(name="sample.slow_once")
def slow_once(folder: str, seconds: float) -> None:
    """Writes one line per run of its body; the first run takes ``seconds``."""
    runs = Path(folder) / "runs"
    first = not runs.exists()
    with runs.open("a") as f:
        f.write(f"{os.getpid()}\n")
    if first:
        time.sleep(seconds)


@app.task(name="sample.ready_on")
def ready_on(folder: str, yes_at: int) -> bool | str:
    """A gate: counts its calls in a file and returns True from call ``yes_at`` on;
    before that a text, which is not True, so a no."""
    calls = Path(folder) / "gate-calls"
    number = len(calls.read_text().splitlines()) + 1 if calls.exists() else 1
    with calls.open("a") as f:
        f.write(f"{number} {time.time()}\n")
    return True if number >= yes_at else "not yet"


@app.task(name="sample.nul_error")
def nul_error() -> None:
    """Raises with bytes PostgreSQL does not store in text (issue 34)."""
    raise ValueError("bad bytes: \x00\x01")


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@app.task(name="sample.unprintable_error")
def unprintable_error() -> None:
    """Raises an exception whose text cannot even be read."""
    raise _Unprintable()
