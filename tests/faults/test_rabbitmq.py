"""The fault suite's broker faults on RabbitMQ, the broker Celery recommends: the rig as
on Redis, on a virtual host of the test's own on the machine's RabbitMQ.

RabbitMQ takes a message back when the channel that holds it unacknowledged closes, and
delivers it again: a killed worker's ticks (held until their ETAs) and runs, and every
worker's when the broker closes their connections. Each redelivery must run nothing
twice and lose nothing. A restart of the broker runs on a private node of the test's
own (``tests.support.services.RabbitMQServer``). Not tried yet: a consumer timeout.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.faults.rig import (
    FAULTS,
    RECOVERY_BOUND,
    Fault,
    Rig,
    account,
    fault_seed,
    recovery_bound,
    run_fault,
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
    """Nothing lost, run twice or crossed, strictly. Found by this test and not fixed:
    after the broker closes its connection, the work path's worker (threads) at times
    fails to acknowledge on the closed channel ("Couldn't ack ... connection already
    closed"), reconnects, and then consumes nothing more: its runs wait unclaimed until
    it is restarted (Celery's issue 3773; docs/how-to/rabbitmq.md). That wait alone is
    an expected failure."""
    seed = fault_seed()
    print(f"rabbitmq:close_connections: seed {seed}")
    ledger = run_fault(rig, [close_connections], random.Random(seed))
    detail = account(rig, ledger, "rabbitmq:close_connections")
    assert not (ledger.lost or ledger.unexpected or ledger.failed), detail
    assert ledger.duplicates == ledger.crossed == 0, detail
    if ledger.unfinished or ledger.recover > recovery_bound(["close_connections"]):
        pytest.xfail(f"the work path's worker stalled (Celery 3773):\n{detail}")


@pytest.fixture
def on_node(tmp_path: Path) -> Iterator[tuple[Rig, RabbitMQServer]]:
    """The rig on a private RabbitMQ node."""
    with (
        postgres_server() as pg,
        rabbitmq_server(tmp_path) as node,
        running(tmp_path, pg, broker=node.url) as rig,
    ):
        yield rig, node


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
