"""The ``cronchain`` command as an operator runs it: a process of its own."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


# One process that imports the command once, then forks a process of its own for each
# command and runs ``python -m cronchain.scheduler.cli``'s ``__main__`` in it, with its
# stdout and stderr in files and stdin on /dev/null; it answers each command's line
# (JSON: argv, stdout's path, stderr's path) with the child's exit status. A fork costs
# milliseconds where a new interpreter's import of cronchain costs one to three seconds.
_FORKER = r"""
import gc, importlib, json, os, runpy, sys
import cronchain.scheduler.cli.main
try:  # what commands import later: the database's driver, the broker's, celery's config
    import cronchain.scheduler.api, cronchain.scheduler.workers.runtime, psycopg
    import cronchain.celeryconfig, kombu.transport.redis
except Exception:  # a CRONCHAIN_* a test set wrong: each command imports it and says so
    pass
gc.freeze()  # else each child's exit, freeing what it shares, copies it: 0.4 s a command
for line in sys.stdin:
    argv, out, err = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        importlib.invalidate_caches()  # a module the test wrote since is found
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_TRUNC), 2)
        sys.argv = ["cronchain", *argv]
        runpy.run_module("cronchain.scheduler.cli", run_name="__main__", alter_sys=True)
        sys.exit(0)  # (its __main__ exits itself)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class Cli:
    """``cronchain ARGS`` as an operator runs it, in ``cwd`` with ``env``: each command
    a process of its own (forked from one that imported cronchain once). A call asserts
    the exit status (``code=``, default 0; None asserts none) and returns what the
    command printed. Close it (or use it as a context manager) to stop the forker."""

    def __init__(self, env: Mapping[str, str], cwd: Path, timeout: float = 60) -> None:
        self.env = dict(env)  # for a test's own processes
        self.cwd = cwd
        self.timeout = timeout
        self._files = tempfile.TemporaryDirectory(prefix="cronchain-cli-")
        self._forker = subprocess.Popen(
            [sys.executable, "-c", _FORKER],
            env=self.env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a kill of its group takes a hung command too
        )

    def __call__(self, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        out, err = (Path(self._files.name) / name for name in ("stdout", "stderr"))
        out.write_text("")
        err.write_text("")
        forker = self._forker
        assert forker.stdin is not None and forker.stdout is not None
        forker.stdin.write(json.dumps([list(args), str(out), str(err)]) + "\n")
        forker.stdin.flush()
        if not select.select([forker.stdout], [], [], self.timeout)[0]:
            self.close()
            raise subprocess.TimeoutExpired(["cronchain", *args], self.timeout)
        answer = forker.stdout.readline()
        assert answer, f"the forking process ended: {forker.wait()}"
        done = subprocess.CompletedProcess(
            ["cronchain", *args], int(answer), out.read_text(), err.read_text()
        )
        assert code is None or done.returncode == code, done.stderr
        return done

    def close(self) -> None:
        if self._forker.poll() is None:
            os.killpg(self._forker.pid, signal.SIGKILL)
        self._forker.wait()
        for stream in (self._forker.stdin, self._forker.stdout):
            if stream is not None:
                stream.close()
        self._files.cleanup()

    def __enter__(self) -> Cli:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def cli_runner(env: Mapping[str, str], cwd: Path) -> Cli:
    """``cronchain ARGS`` as an operator runs it, in ``cwd``; asserts its exit status
    (``code=``, default 0) and returns what it printed."""
    return Cli(env, cwd)


def process_cli(pg_url: str, tmp_path: Path) -> Cli:
    """``cronchain ARGS`` in a process of its own, on ``pg_url``'s database."""
    env = dict(os.environ, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_HOME=str(tmp_path / "home"))
    env |= KEEP_HISTORY
    env.pop("CRONCHAIN_BROKER_URL", None)  # messages go to the embedded filesystem broker
    return cli_runner(env, tmp_path)
