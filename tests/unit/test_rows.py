"""The rows a hot path makes without their dataclasses' ``__init__`` are the rows that
``__init__`` makes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from cronchain.scheduler.storage.rows import (
    INVOCATION_COLUMNS,
    JOB_COLUMNS,
    InvocationRow,
    JobRow,
)
from cronchain.statemachine import JobSnapshot, JobState

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


def test_a_job_read_by_position_is_the_job_made():
    snapshot = JobSnapshot(JobState.RUNNING, NOW, 5, 7, True, 0, 1, 0, None)
    made = JobRow(3, "p", "j", "noop", "every 10s", "UTC", {"noop": {}}, "r1", True, False,
                  None, 2, NOW, snapshot, downstream=True)  # fmt: skip
    own = [getattr(made, c) for c in JOB_COLUMNS if c not in vars(snapshot)]
    values = own + [getattr(snapshot, c) for c in vars(snapshot)]
    values[JOB_COLUMNS.index("state")] = "RUNNING"  # as the driver reads it
    read = JobRow.from_values(values)
    assert read == made and repr(read) == repr(made)
    assert read.snapshot.state is JobState.RUNNING and read.snapshot is not snapshot


def test_a_changed_run_is_the_run_replaced():
    before = run()
    changed = before.changed(status="SUCCEEDED", worker="w", started_at=NOW)
    assert changed == dataclasses.replace(before, status="SUCCEEDED", worker="w", started_at=NOW)
    assert before.status == "RUNNING"  # left as it was
    with pytest.raises(TypeError, match="stauts"):
        before.changed(stauts="SUCCEEDED")
