"""The embedded broker never hands out a half-written message and survives a bad one."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kombu import Connection

import scheduler.fsbroker  # noqa: F401  (registers the transport)


@pytest.fixture
def queue_name() -> str:
    """kombu remembers declared queues per process, not per folder: one name per test."""
    return f"q{uuid.uuid4().hex[:8]}"


@pytest.fixture
def connection(tmp_path: Path):  # type: ignore[no-untyped-def]
    options = {
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "control_folder": str(tmp_path / "control"),
    }
    with Connection("cronchainfs://", transport_options=options) as conn:
        yield conn


def test_messages_round_trip_and_leave_nothing_behind(connection, tmp_path, queue_name):  # type: ignore[no-untyped-def]
    queue = connection.SimpleQueue(queue_name)
    queue.put({"n": 1})
    assert queue.get(timeout=1).payload == {"n": 1}
    assert [p.name for p in tmp_path.glob("*.msg")] == []
    assert list((tmp_path / "processing").iterdir()) == []


def test_an_unreadable_or_unfinished_message_is_not_fatal(connection, tmp_path, queue_name):  # type: ignore[no-untyped-def]
    queue = connection.SimpleQueue(queue_name)
    broken = tmp_path / f"0_broken.{queue_name}.msg"  # what a reader saw mid-write before
    staging = tmp_path / f".1_staging.{queue_name}.msg.tmp"  # a write still in progress
    broken.write_bytes(b"")
    staging.write_bytes(b"{")
    queue.put({"n": 2})
    assert queue.get(timeout=1).payload == {"n": 2}
    assert not broken.exists()
    assert staging.exists()
