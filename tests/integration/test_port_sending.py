"""``CeleryPort.sending``: the ticks an apply sends go through one producer, to Redis in
pipelines. The messages are the ones sent one at a time; a broker that is gone leaves
the ticks to the watchdog and says so, as a send one at a time does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.workers import port as port_module
from cronchain.scheduler.workers.port import CeleryPort
from cronchain.scheduler.workers.runtime import CommandPort, sending_app
from tests.support.services import RedisServer, free_port, redis_server

pytestmark = pytest.mark.redis

ETA = datetime(2026, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def celery_port(broker_url: str) -> CeleryPort:
    app = sending_app()
    app.conf.broker_url = broker_url
    return CeleryPort(app, "cronchain")


def send_ticks(port: CeleryPort | CommandPort, count: int) -> None:
    for i in range(count):
        port.tick_later(i, 10**17 + i, ETA + timedelta(seconds=i))
        port.tick_batch([(i, 1), (i + 1, 2**62)], ETA)


def queued(redis: RedisServer) -> list[dict[str, Any]]:
    """The messages in the queue, oldest first, without what differs for each send."""
    found = []
    for raw in reversed(redis.client().lrange("cronchain", 0, -1)):
        message = json.loads(raw)
        for key in ("id", "root_id"):
            message["headers"].pop(key)
        for key in ("correlation_id", "delivery_tag"):
            message["properties"].pop(key)
        found.append(message)
    return found


def test_the_messages_are_those_sent_one_at_a_time(
    redis: RedisServer, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(port_module, "PIPELINE", 7)  # several pipelines, the last part full
    port = celery_port(redis.url)
    send_ticks(port, 10)
    one_at_a_time = queued(redis)
    redis.client().delete("cronchain")

    with port.sending():
        send_ticks(port, 10)
        assert 0 < redis.client().llen("cronchain") < 20  # pipelines of 7 went, not the rest
    assert queued(redis) == one_at_a_time
    assert len(one_at_a_time) == 20
    assert one_at_a_time[1]["headers"]["argsrepr"] == "([(0, 1), (1, 4611686018427387904)],)"


def test_a_broker_that_is_gone_leaves_the_ticks_unsent_and_says_so():
    gone = f"redis://127.0.0.1:{free_port()}/0"
    port = CommandPort(celery_port(gone), gone)
    with port.sending():
        with pytest.raises(TransientError):
            port.tick_later(1, 2, ETA)
        assert port.unsent is not None
        with pytest.raises(TransientError):  # and sends no more
            port.tick_batch([(1, 2)], ETA)
    assert "did not answer" in str(port.unsent)


def test_the_last_pipeline_lost_is_told(redis: RedisServer, caplog: pytest.LogCaptureFixture):
    """The broker goes away after the ticks were held, before the block ends."""
    port = CommandPort(celery_port(redis.url), redis.url)
    with port.sending():
        send_ticks(port, 3)
        redis.stop()
    assert port.unsent is not None and "did not answer" in str(port.unsent)

    caplog.clear()
    plain = celery_port(redis.url)
    with plain.sending():
        send_ticks(plain, 3)
    assert any("the watchdog will send them" in r.getMessage() for r in caplog.records)
