"""Lease renewal while the database is away: it backs off instead of spinning."""

from __future__ import annotations

import socket
from datetime import timedelta

from cronchain.scheduler.core.leases import Lease, Leases, retry_delay
from cronchain.scheduler.storage.db import make_engine
from tests.support.engine import Clock


def test_the_retry_delay_doubles_up_to_the_usual_cadence():
    length = timedelta(seconds=60)
    delays = [retry_delay(n, length).total_seconds() for n in range(1, 10)]
    assert delays == [0.25, 0.5, 1, 2, 4, 8, 16, 20, 20]


def test_a_renewal_that_cannot_reach_the_database_is_tried_later_and_later():
    with socket.socket() as s:  # a port nobody listens on: connections are refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clock = Clock()
    leases = Leases(make_engine(f"postgresql://postgres@127.0.0.1:{port}/none"), clock)
    lease = Lease(1, 1, timedelta(seconds=30))
    waits = []
    for _ in range(4):
        assert leases.renew(lease) is True  # not known to be lost: the work goes on
        assert lease.due is not None
        waits.append((lease.due - clock.now).total_seconds())
    assert waits == [0.25, 0.5, 1, 2] and lease.failures == 4
