"""The rows a hot path makes without their dataclasses' ``__init__`` are the rows that
``__init__`` makes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from cronchain.scheduler.storage.rows import INVOCATION_COLUMNS, InvocationRow

NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)


def run() -> InvocationRow:
    return InvocationRow(7, 3, NOW, None, "r1", "RUNNING", 1, NOW, None, None, NOW, None,
                         None, None, False, filed_at=NOW)  # fmt: skip


def test_a_run_read_by_position_is_the_run_made():
    made = run()
    read = InvocationRow.from_values([getattr(made, c) for c in INVOCATION_COLUMNS])
    assert read == made and repr(read) == repr(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.status = "SUCCEEDED"  # type: ignore[misc]


def test_a_changed_run_is_the_run_replaced():
    before = run()
    changed = before.changed(status="SUCCEEDED", worker="w", started_at=NOW)
    assert changed == dataclasses.replace(before, status="SUCCEEDED", worker="w", started_at=NOW)
    assert before.status == "RUNNING"  # left as it was
    with pytest.raises(TypeError, match="stauts"):
        before.changed(stauts="SUCCEEDED")
