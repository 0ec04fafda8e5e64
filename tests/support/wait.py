"""Waiting on real processes and servers, by the wall clock."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """``predicate()``'s first true value, asked every ``every`` seconds; after
    ``timeout`` seconds, ``AssertionError`` naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


def every_soon(seconds: int, lead: int) -> str:
    """``every {seconds}s``, offset so that its next slot is ``lead`` to ``lead + 1``
    seconds from now, rather than anywhere up to a whole period away."""
    offset = (math.ceil(time.time()) + lead) % seconds
    return f"every {seconds}s offset {offset}s" if offset else f"every {seconds}s"
