"""The process's event loop for calls: one daemon thread that holds every ``http`` call
(and gate check) in flight at once, so that a thousand slow endpoints take a thousand
sockets, not a thousand threads.

Threads hand it coroutines (``submit``, ``run``). Each process has its own: a prefork
child forgets the loop it inherited (its thread did not survive the fork) and starts one.
"""

from __future__ import annotations

import asyncio
import os
import resource
import threading
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any, TypeVar

T = TypeVar("T")

# Threads that resolve names for the loop (getaddrinfo blocks): asyncio's default, sized
# for the cores, would queue a herd's lookups behind a slow resolver.
RESOLVERS = 32
OPEN_FILES = 65_536  # asked for when the hard limit is unbounded

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None:
            _more_open_files()
            _loop = asyncio.new_event_loop()
            _loop.set_default_executor(
                ThreadPoolExecutor(RESOLVERS, thread_name_prefix="cronchain-resolve")
            )
            threading.Thread(target=_loop.run_forever, name="cronchain-calls", daemon=True).start()
        return _loop


def _forgotten() -> None:
    """In a forked child: the parent's loop, its thread and its lock are not this
    process's (the lock may have been held by a thread the fork left behind)."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forgotten)


def submit(coroutine: Coroutine[Any, Any, T]) -> Future[T]:
    return asyncio.run_coroutine_threadsafe(coroutine, loop())


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """The coroutine's result, this thread waiting for it (never the loop's own thread)."""
    return submit(coroutine).result()


def _more_open_files() -> None:
    """Let the process open as many files as its hard limit allows: every call in flight
    is a socket, and the usual soft limit (1,024) is below a herd of calls (as Go's
    runtime does for every program)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unbounded = resource.RLIM_INFINITY
    wanted = OPEN_FILES if hard == unbounded else hard
    if soft != unbounded and soft < wanted:
        with suppress(ValueError, OSError):  # else kept: calls past it fail with EMFILE
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
