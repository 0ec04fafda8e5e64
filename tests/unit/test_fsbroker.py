"""The embedded broker never hands out a half-written message and survives a bad one."""

from __future__ import annotations

import uuid
from pathlib import Path
from time import monotonic

import pytest
from kombu import Connection, Queue
from kombu.asynchronous import Hub
from kombu.message import Message

import scheduler.workers.fsbroker  # noqa: F401  (registers the transport)


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


def test_a_worker_event_loop_polls_the_folder_and_stops_when_closed(connection, queue_name):  # type: ignore[no-untyped-def]
    """Celery gives a worker its event loop and asynchronous pool only on a transport that
    says it is asynchronous (scheduler.workers.fsbroker.Transport says why that matters); the
    loop must then deliver the folder's messages, and stop polling with the connection."""
    assert connection.transport.implements.asynchronous
    received: list[dict[str, int]] = []

    def on_message(body: dict[str, int], message: Message) -> None:
        received.append(body)
        message.ack()

    hub = Hub()
    queue = Queue(queue_name)
    with connection.Consumer(queue, callbacks=[on_message]):
        connection.transport.register_with_event_loop(connection.connection, hub)
        with connection.Producer() as producer:
            for n in range(3):
                producer.publish({"n": n}, routing_key=queue_name, declare=[queue])
        loop = hub.create_loop()
        deadline = monotonic() + 5
        while len(received) < 3 and monotonic() < deadline:
            next(loop)
        # Names sort by millisecond, then at random: no order within a millisecond.
        assert sorted(r["n"] for r in received) == [0, 1, 2]
        connection.transport.close_connection(connection.connection)
        assert [s.entry.canceled for s in hub.timer.queue] == [True]
