"""The per-invocation debug log: what happened to a run, line by line, in its own row.

Bounded so that a chatty task cannot bloat the table: past ``LIMIT`` characters the
middle is cut, keeping the start (how it began) and the end (how it ended).
"""

from __future__ import annotations

from datetime import datetime

LIMIT = 16 * 1024
HEAD = 4 * 1024
MARK = "\n[... {} characters trimmed ...]\n"
LINE_LIMIT = 2000


def append(log: str | None, now: datetime, line: str) -> str:
    if len(line) > LINE_LIMIT:
        line = line[:LINE_LIMIT] + f"... ({len(line) - LINE_LIMIT} more characters)"
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return trim(f"{log or ''}{stamp} {line}\n")


def trim(text: str, limit: int = LIMIT) -> str:
    """Cut the middle of ``text`` to keep it within ``limit`` characters."""
    if len(text) <= limit:
        return text
    tail = limit - HEAD - len(MARK.format(len(text)))
    cut = len(text) - HEAD - tail
    return text[:HEAD] + MARK.format(cut) + text[-tail:]
