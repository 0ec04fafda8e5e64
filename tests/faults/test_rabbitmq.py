"""The fault suite's broker faults on RabbitMQ, the broker Celery recommends: the rig as
on Redis, on a virtual host of the test's own on the machine's RabbitMQ.

RabbitMQ takes a message back when the channel that holds it unacknowledged closes, and
delivers it again: a killed worker's ticks (held until their ETAs) and runs, and every
worker's when the broker closes their connections. Each redelivery must run nothing
twice and lose nothing. A restart of the broker runs on a private node of the test's
own (``tests.support.services.RabbitMQServer``), and so does a consumer timeout.

Found by these tests, and fixed: after a reconnection, the work path's worker (threads)
at times stopped taking messages. Celery raised its prefetch count again from the pool's
threads, with a read of the connection its main thread reads; the two split frames
between them (``celeryconfig``'s ``worker_enable_prefetch_count_reduction``). Each
test here also checks that no worker read its connection off the main thread
(``tests.faults.amqp_watch``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.faults.amqp_watch import OFF_MAIN
from tests.faults.rig import (
    FAULTS,
    RECOVERY_BOUND,
    Fault,
    Rig,
    recovery_bound,
    running,
    whole_after,
)
from tests.support.services import (
    RabbitMQServer,
    postgres_server,
    rabbitmq_server,
    rabbitmq_vhost,
    rabbitmqctl,
)
from tests.support.wait import now

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.faults]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with (
        postgres_server() as pg,
        rabbitmq_vhost() as broker,
        running(tmp_path, pg, broker=broker) as rig,
    ):
        yield rig
        one_reader(rig)


def one_reader(rig: Rig) -> None:
    """No worker read its AMQP connection from a second thread."""
    for name in rig.cluster.processes:
        log = rig.cluster.log(name)
        assert OFF_MAIN not in log, log[log.index(OFF_MAIN) - 200 :][:3000]


def close_connections(rig: Rig, rng: random.Random) -> datetime:
    """RabbitMQ closes every connection of the rig's virtual host: each worker's and
    beat's. What the workers held unacknowledged is delivered again; they reconnect."""
    assert rig.broker is not None
    vhost = rig.broker.rsplit("/", 1)[1]
    rabbitmqctl("close_all_connections", "-p", vhost, "the fault suite closes them")
    return now()


RABBITMQ_FAULTS = {
    "kill_worker": FAULTS["kill_worker"],  # unacknowledged ticks and runs redelivered
    "two_beats": FAULTS["two_beats"],
}


@pytest.mark.parametrize("fault", sorted(RABBITMQ_FAULTS))
def test_fault_on_rabbitmq(rig: Rig, fault: str) -> None:
    ledger, detail = whole_after(rig, [RABBITMQ_FAULTS[fault]], f"rabbitmq:{fault}")
    assert ledger.recover <= recovery_bound([fault]), detail


def test_closed_connections_on_rabbitmq(rig: Rig) -> None:
    ledger, detail = whole_after(rig, [close_connections], "rabbitmq:close_connections")
    assert ledger.recover <= recovery_bound(["close_connections"]), detail


@pytest.fixture
def on_node(tmp_path: Path) -> Iterator[tuple[Rig, RabbitMQServer]]:
    """The rig on a private RabbitMQ node."""
    with (
        postgres_server() as pg,
        rabbitmq_server(tmp_path) as node,
        running(tmp_path, pg, broker=node.url) as rig,
    ):
        yield rig, node
        one_reader(rig)


def restart_broker(node: RabbitMQServer) -> Fault:
    def restart_broker(rig: Rig, rng: random.Random) -> datetime:
        """The node stopped cleanly and started again (its queues and persistent
        messages kept), as an upgrade or a host's reboot does: every worker and beat
        lose their connections for as long."""
        node.stop()
        time.sleep(rng.uniform(1.0, 3.0))
        node.start()
        return now()

    return restart_broker


def test_broker_restart_on_rabbitmq(on_node: tuple[Rig, RabbitMQServer]) -> None:
    rig, node = on_node
    ledger, detail = whole_after(rig, [restart_broker(node)], "rabbitmq:restart_broker")
    assert ledger.recover <= RECOVERY_BOUND, detail
    # The slots of the outage are skipped by the jobs' (default) policies, and nothing
    # else: overlap for a slow job whose run spans it, misfire for the rest.
    assert set(ledger.skipped) <= {"misfire", "overlap"}, detail


CONSUMER_TIMEOUT = 4.0  # seconds; RabbitMQ's default is 30 minutes


@pytest.fixture
def impatient(tmp_path: Path) -> Iterator[tuple[Rig, RabbitMQServer]]:
    """The rig on a private node that closes the channel of a consumer holding a
    delivery unacknowledged longer than ``CONSUMER_TIMEOUT``, and looks every half
    second (by default, every minute)."""
    config = f"consumer_timeout = {CONSUMER_TIMEOUT * 1000:.0f}\n"
    with (
        postgres_server() as pg,
        rabbitmq_server(tmp_path, config, "[{rabbit, [{channel_tick_interval, 500}]}]") as node,
        running(tmp_path, pg, broker=node.url) as rig,
    ):
        yield rig, node
        one_reader(rig)


def outlast_the_consumer_timeout(slowed: list[float]) -> Fault:
    def outlast_the_consumer_timeout(rig: Rig, rng: random.Random) -> datetime:
        """For a while the http jobs' endpoint answers after twice the consumer timeout."""
        rig.endpoint.delay = 2 * CONSUMER_TIMEOUT
        slowed.append(time.time())
        time.sleep(rng.uniform(10.0, 15.0))
        rig.endpoint.delay = rig.call_seconds
        slowed.append(time.time())
        return now()

    return outlast_the_consumer_timeout


def test_runs_outlast_the_consumer_timeout(impatient: tuple[Rig, RabbitMQServer]) -> None:
    """A run longer than RabbitMQ's consumer timeout trips nothing: its message was
    acknowledged as the run began. (Held until its calls ended, as it was, the broker
    closed the work path's channel: Celery's worker exited, or with
    ``broker_channel_error_retry`` reconnected and at times read no more.)"""
    rig, node = impatient
    armed = node.ctl("eval", "application:get_env(rabbit, consumer_timeout).").strip()
    assert armed == f"{{ok,{CONSUMER_TIMEOUT * 1000:.0f}}}", armed
    slowed: list[float] = []
    ledger, detail = whole_after(
        rig, [outlast_the_consumer_timeout(slowed)], "rabbitmq:consumer_timeout"
    )
    assert ledger.recover <= RECOVERY_BOUND, detail
    # The endpoint took calls while it was slow: those runs outlasted the timeout.
    assert any(slowed[0] <= call.at <= slowed[1] for call in rig.endpoint.received), detail
    timed_out = [
        line
        for log in (node.folder / "log").glob("*.log")
        for line in log.read_text(errors="replace").splitlines()
        if "timed out waiting for delivery acknowledgement" in line
    ]
    assert not timed_out, "\n".join(timed_out[:5])
