"""Tasks for the ``celery`` job kind's end-to-end tests (imported via CRONCHAIN_IMPORTS)."""

import os
import time
from pathlib import Path

from tasks import app


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
