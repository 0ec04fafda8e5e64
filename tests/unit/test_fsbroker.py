"""The embedded broker never hands out a half-written message and survives a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest
from kombu import Connection

import scheduler.fsbroker  # noqa: F401  (registers the transport)


@pytest.fixture
def connection(tmp_path: Path):  # type: ignore[no-untyped-def]
    options = {
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "control_folder": str(tmp_path / "control"),
    }
    with Connection("cronchainfs://", transport_options=options) as conn:
        yield conn


def test_messages_round_trip_and_leave_nothing_behind(connection, tmp_path: Path):  # type: ignore[no-untyped-def]
    queue = connection.SimpleQueue("q")
    queue.put({"n": 1})
    assert queue.get(timeout=1).payload == {"n": 1}
    assert [p.name for p in tmp_path.glob("*.msg")] == []
    assert list((tmp_path / "processing").iterdir()) == []


def test_an_unreadable_or_unfinished_message_is_not_fatal(connection, tmp_path: Path):  # type: ignore[no-untyped-def]
    queue = connection.SimpleQueue("q")
    (tmp_path / "0_broken.q.msg").write_bytes(b"")  # what a reader saw mid-write before
    (tmp_path / ".1_staging.q.msg.tmp").write_bytes(b"{")  # a write still in progress
    queue.put({"n": 2})
    assert queue.get(timeout=1).payload == {"n": 2}
    assert not (tmp_path / "0_broken.q.msg").exists()
    assert (tmp_path / ".1_staging.q.msg.tmp").exists()
