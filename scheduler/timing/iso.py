"""Instants as cronchain writes them: ISO 8601 with a ``Z`` for UTC, in every JSON answer,
stored record, log line and alert, so that one instant has one spelling everywhere."""

from __future__ import annotations

from datetime import datetime
from typing import overload


@overload
def iso(t: datetime) -> str: ...


@overload
def iso(t: None) -> None: ...


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat().replace("+00:00", "Z")


def parsed(text: str | None) -> datetime | None:
    """An instant as ``iso`` (or ``datetime.isoformat``) wrote it into a stored record
    (a retry's attempts, a hold's checks); None for none."""
    return datetime.fromisoformat(text) if text else None
