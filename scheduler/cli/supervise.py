"""``cronchain up``'s child processes: start them, pass a stop on, stop all when one ends.

``cronchain up`` runs two Celery workers, one per path (docs/concepts/two-paths.md), so it can
no longer become its worker by ``exec``: it stays as their parent and supervises them, as
a process manager would. Stopping is what matters most, and it has to work however the
signal arrives: to ``up`` alone (``kill PID``, ``docker stop``) or to its whole process
group (a terminal's Ctrl-C, ``timeout``, supervisors).

Each worker runs in a process group of its own, so that a signal to ``up``'s group
reaches ``up`` alone, and ``up`` passes SIGTERM on to each worker's main process only:
Celery's warm shutdown, whichever of SIGINT or SIGTERM came. Were the workers in
``up``'s group, they would get the signal twice (a second SIGINT turns Celery's shutdown
cold), and so would their prefork pool processes, which exit on SIGTERM at once, in the
middle of their tasks. (systemd's default ``KillMode=control-group`` signals every
process of the unit regardless; ``KillMode=mixed`` signals the main process only.)

The first signal stops new work: each path finishes the runs it holds, for at most
``grace`` seconds, and ``up`` says which runs it waits for (``waiting``). A second stops
at once: each worker's process group is killed, as it is when ``grace`` runs out. Either
way ``up`` stopped as asked and exits 0; what a killed worker left unfinished is the
watchdog's (its leases lapse; the job's retries apply). A path that exits unasked is a
failure: the other is stopped and ``up`` exits 1. If ``up`` itself dies unasked
(SIGKILL), Linux sends each worker SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any

# Time a path has to finish its running tasks once asked to stop, before it is killed.
STOP_GRACE = 30.0
# What the children get for the first, and for a second, stop request.
ESCALATION = (signal.SIGTERM, signal.SIGKILL)
_PR_SET_PDEATHSIG = 1


def supervise(
    commands: Mapping[str, Sequence[str]],
    grace: float = STOP_GRACE,
    waiting: Callable[[], str] | None = None,
) -> int:
    """Run each named command as a child until a stop is asked for or one exits.

    Returns 0 when SIGINT or SIGTERM stopped every child (in their time, or killed at a
    second request or after ``grace`` seconds), and 1 when a child exited unasked.
    ``waiting``: what the children are finishing, said at the first request."""
    requests: list[int] = []
    with _signals_recorded(requests) as wakeup:
        children: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name, command in commands.items():
                children[name] = _start(command)
        except BaseException:
            for process in children.values():
                process.kill()
                process.wait()
            raise
        return Supervisor(children, grace, waiting=waiting).run(requests, wakeup)


class Supervisor:
    """The stopping policy over running children, apart from how signals reach it.

    ``run`` waits on ``wakeup`` (a file that a signal or a child's exit makes readable)
    and calls ``step`` with the stop requests received so far; tests may call ``step``
    directly with a clock of their own."""

    def __init__(
        self,
        children: Mapping[str, subprocess.Popen[Any]],
        grace: float,
        clock: Callable[[], float] = time.monotonic,
        waiting: Callable[[], str] | None = None,
    ) -> None:
        self.children = dict(children)
        self.grace = grace
        self.clock = clock
        self.waiting = waiting
        self.handled = 0  # stop requests acted on
        self.stop_deadline: float | None = None
        self.killed = False
        self.failures: list[str] = []

    def run(self, requests: list[int], wakeup: int) -> int:
        while (timeout := self.step(requests)) is not None:
            select.select([wakeup], [], [], None if timeout == math.inf else timeout)
            with contextlib.suppress(BlockingIOError):
                while os.read(wakeup, 512):
                    pass
        if self.failures:
            _say(f"{'; '.join(self.failures)}: exiting with status 1")
            return 1
        _say("stopped")
        return 0

    def step(self, requests: Sequence[int]) -> float | None:
        """Act on new stop requests, exits and the deadline; return how long to wait at
        most before the next step (``math.inf`` when only a signal or an exit can change
        anything), or None once every child has exited."""
        while self.handled < len(requests):
            name = signal.Signals(requests[self.handled]).name
            first = self.handled == 0 and self.stop_deadline is None
            self._stop(ESCALATION[min(self.handled, len(ESCALATION) - 1)], f"got {name}")
            if first:
                self._say_what_it_waits_for()
            self.handled += 1
        alive = {name: p for name, p in self.children.items() if p.poll() is None}
        for name, process in self.children.items():
            if name not in alive and self.stop_deadline is None:
                self.failures.append(f"the {name} path exited on its own ({_status(process)})")
                self._stop(signal.SIGTERM, self.failures[-1])
        if not alive:
            return None
        if self.stop_deadline is None:
            return math.inf
        left = self.stop_deadline - self.clock()
        if left > 0 or self.killed:
            return left if left > 0 else 0.5  # killed: until the kernel reaps them
        self._stop(signal.SIGKILL, f"{', '.join(alive)} did not stop within {self.grace:g} s")
        return 0.5

    def _stop(self, sig: signal.Signals, why: str) -> None:
        if self.stop_deadline is None:
            self.stop_deadline = self.clock() + self.grace
        alive = [name for name, p in self.children.items() if p.poll() is None]
        if sig == signal.SIGKILL:
            self.killed = True
        if alive:
            _say(f"{why}: sending {sig.name} to {', '.join(alive)}")
        for name in alive:
            with contextlib.suppress(ProcessLookupError):
                if sig == signal.SIGKILL:  # the worker with its pool and beat processes
                    os.killpg(self.children[name].pid, sig)
                else:  # its main process, which stops the others in its own time
                    self.children[name].send_signal(sig)

    def _say_what_it_waits_for(self) -> None:
        try:
            what = self.waiting() if self.waiting else ""
        except Exception as err:  # the database is away: say so, and stop all the same
            what = f"the runs in hand (which ones, unknown: {type(err).__name__})"
        _say(
            f"finishing {what or 'the tasks in hand'} for at most {self.grace:g} s;"
            " again (Ctrl-C) to stop at once: the watchdog takes over what is left"
        )


@contextlib.contextmanager
def _signals_recorded(requests: list[int]) -> Iterator[int]:
    """Record SIGINT and SIGTERM in ``requests`` instead of dying of them, and yield a
    file that each of them, and each exit of a child (SIGCHLD), makes readable."""

    def record(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGCHLD:
            requests.append(signum)

    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write)
    previous = {s: signal.signal(s, record) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, record)
    try:
        yield read
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(read)
        os.close(write)


def _start(command: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start a command in a process group of its own that gets SIGTERM (a warm shutdown)
    if ``up`` dies without stopping it, SIGKILL for instance (Linux only)."""
    parent = os.getpid()
    prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None

    def die_with_parent() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # it died before prctl
                os.kill(os.getpid(), signal.SIGTERM)

    return subprocess.Popen(list(command), process_group=0, preexec_fn=die_with_parent)


def _status(process: subprocess.Popen[Any]) -> str:
    code = process.returncode
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"status {code}"


def _say(text: str) -> None:
    print(f"cronchain: {text}", file=sys.stderr, flush=True)
