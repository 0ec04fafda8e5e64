"""The ``cronchain`` command as an operator runs it: a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

Cli = Callable[..., "subprocess.CompletedProcess[str]"]

# History kept a century: these tests backfill fixed dates of 2026, which retention's
# default (180 days) refuses as the real clock moves on (a backfill into a month
# retention drops is refused).
KEEP_HISTORY = {"CRONCHAIN_RETENTION": "36500"}

DEMO_FILE = """
project: demo
jobs:
  - name: ping
    schedule: every 5s
    noop: {}
  - name: nightly
    schedule: "0 2 * * *"
    timezone: Europe/Berlin
    days: both
    noop: {}
"""


def cli_runner(env: Mapping[str, str], cwd: Path) -> Cli:
    """``cronchain ARGS`` as an operator runs it, in ``cwd``; asserts its exit status
    (``code=``, default 0) and returns what it printed."""

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "cronchain.scheduler.cli", *args],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=cwd,
        )
        assert done.returncode == code, done.stderr
        return done

    run.env = dict(env)  # type: ignore[attr-defined]  # for a test's own processes
    return run


def process_cli(pg_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``cronchain ARGS`` in a process of its own, on ``pg_url``'s database."""
    env = dict(os.environ, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_HOME=str(tmp_path / "home"))
    env |= KEEP_HISTORY
    env.pop("CRONCHAIN_BROKER_URL", None)  # messages go to the embedded filesystem broker
    return cli_runner(env, tmp_path)
