"""Waiting on real processes and servers, by the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """``predicate()``'s first true value, asked every 0.2 s; after ``timeout`` seconds,
    ``AssertionError`` naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)
