"""The per-invocation debug log: what happened to a run, line by line, in its own row.

Bounded so that a chatty task cannot bloat the table: past ``LIMIT`` characters the
middle is cut, keeping the start (how it began) and the end (how it ended).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

LIMIT = 16 * 1024
HEAD = 4 * 1024
MARK = "\n[... {} characters trimmed ...]\n"
LINE_LIMIT = 2000


def append(log: str | None, now: datetime, line: str) -> str:
    if len(line) > LINE_LIMIT:
        line = line[:LINE_LIMIT] + f"... ({len(line) - LINE_LIMIT} more characters)"
    return trim(f"{log or ''}{_stamp(now)} {line}\n")


@lru_cache(maxsize=4)
def _stamp(now: datetime) -> str:
    """Kept: a batch's runs share one ``now``, and formatting it was most of a line's
    cost. In UTC, which the mark says: an equal instant in another zone hits the same
    entry."""
    if now.tzinfo is not None:
        now = now.astimezone(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def trim(text: str, limit: int = LIMIT) -> str:
    """Cut the middle of ``text`` to keep it within ``limit`` characters."""
    if len(text) <= limit:
        return text
    tail = limit - HEAD - len(MARK.format(len(text)))
    cut = len(text) - HEAD - tail
    return text[:HEAD] + MARK.format(cut) + text[-tail:]
