"""A network split: a control worker, a work-path worker and a worker of the user's
tasks run in a network namespace of the test's own, beside the rig's workers on this
machine. Mid-run the namespace is cut off from PostgreSQL, Redis and the http jobs'
endpoint (a black hole: packets dropped without an answer) for three to four leases,
then the split heals.

The cut-off workers keep running what they hold (the user's tasks are all theirs as
the split comes); their leases lapse; the watchdog on this side of the split ends those
attempts (``lease expired``) and retries them here.
When the split heals, the revokes sent as their leases lapsed reach the cut-off workers
and stop those tasks, or the workers' late reports are refused (their attempts are no
longer current) and logged. The ledger: every slot once, no task body run and no
call made twice for one attempt.

Two splits of one process each: beat cut off (with the broker and the database) for
several watchdog intervals, and the namespace's workers cut off from the broker alone,
the database still in reach, over a second veth pair that only the broker listens on.
And the other way round: the namespace's workers cut off from the database alone, the
broker still in reach, so that they go on taking messages they cannot act on.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from cronchain.scheduler.storage.models import invocations
from cronchain.scheduler.storage.observed import watchdog_passes
from tests.faults.rig import (
    LEASE,
    WATCHDOG_INTERVAL,
    Fault,
    Rig,
    lapsed_leases,
    running,
    whole_after,
)
from tests.support.netns import Namespace
from tests.support.services import postgres_server
from tests.support.wait import now, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.faults]

# The workers in the namespace, by name: (their queues, the rig's worker they are like).
CUT_OFF = {
    "worker_ns": ("cronchain", "worker"),
    "work_ns": ("cronchain.work", "work"),
    "tasks_ns": ("slow", "tasks"),
}


@contextmanager
def beside(tmp_path: Path, namespace: Namespace, pg_link: int = 0, **options: Any) -> Iterator[Rig]:
    """A rig whose servers listen on the namespace's pairs (PostgreSQL on ``pg_link``'s,
    the others on the first unless ``options`` say), with the ``CUT_OFF`` workers in
    the namespace; the namespace is destroyed after."""

    def cut_off(rig: Rig) -> None:
        rig.cluster.netns = {name: namespace.prefix() for name in CUT_OFF}

    pair = (namespace.host_of(pg_link), namespace.subnet_of(pg_link))
    try:
        with (
            postgres_server(*pair) as pg,
            running(
                tmp_path, pg, cut_off, host=namespace.host, namespace=namespace, **options
            ) as rig,
        ):
            rig.start_workers(CUT_OFF)
            yield rig
    finally:
        namespace.destroy()


@pytest.fixture
def split(tmp_path: Path) -> Iterator[Rig]:
    with beside(tmp_path, Namespace.create()) as rig:
        yield rig


def holding(rig: Rig) -> None:
    """Wait until the namespace's worker of the user's tasks runs one (its run claimed,
    not ended), so that a split that comes now finds it holding work. A fixed wait after
    the rig's own worker stopped did not always: on a busy machine the namespace's took
    its first task seconds later."""

    def claimed() -> bool:
        with rig.db.connect() as conn:
            return bool(
                conn.execute(
                    select(func.count()).where(
                        invocations.c.worker.like("%tasks\\_ns@%", escape="\\"),
                        invocations.c.status == "RUNNING",
                    )
                ).scalar_one()
            )

    wait_until(claimed, 30, "the namespace's worker to run a task of the user's")


def partition(rig: Rig, rng: random.Random) -> datetime:
    """The namespace cut off for three to four leases, then healed. Its worker of the
    user's tasks holds one as the split comes (``holding``): the rig's own is stopped
    before, and starts again on this side of the split to take the retries."""
    assert rig.namespace is not None
    rig.kill("tasks")
    time.sleep(rng.uniform(0.5, 1.0))
    holding(rig)
    rig.namespace.cut()
    cut = time.monotonic()
    rig.start_worker("tasks")
    time.sleep(max(0.0, rng.uniform(3 * LEASE, 4 * LEASE) - (time.monotonic() - cut)))
    rig.namespace.heal()
    return now()


def test_partition(split: Rig) -> None:
    _, detail = whole_after(split, [partition], "partition")
    lapsed = len(lapsed_leases(split))
    assert lapsed > 0, f"the cut-off workers held no attempt:\n{detail}"

    def ended() -> tuple[int, int] | None:
        logs = [split.cluster.log(name) for name in CUT_OFF]
        refused = sum(log.count(" ignored: ") for log in logs)
        revoked = sum(log.count(" as revoked") for log in logs)
        return (refused, revoked) if refused + revoked else None

    # Each lapsed attempt's task ends one of two ways once the split heals: the revoke
    # sent as its lease lapsed reaches its worker and stops it, or its report is refused.
    # A report waits in a query that TCP sends again after backing off: up to some 13 s
    # after a split this long.
    refused, revoked = wait_until(ended, 30, f"a late report refused or a task revoked\n{detail}")
    print(f"leases lapsed and retried: {lapsed}; late reports refused {refused}, revoked {revoked}")


@pytest.fixture
def beat_apart(tmp_path: Path) -> Iterator[Rig]:
    """The rig with its beat in a namespace (the database and Redis on its pair)."""
    namespace = Namespace.create()

    def beat_inside(rig: Rig) -> None:
        rig.cluster.netns = {"beat": namespace.prefix()}

    try:
        with (
            postgres_server(namespace.host, namespace.subnet) as pg,
            running(tmp_path, pg, beat_inside, host=namespace.host, namespace=namespace) as rig,
        ):
            yield rig
    finally:
        namespace.destroy()


@dataclass
class Split:
    """When a fault cut the namespace off and when it healed, by the database's clock
    as this process reads it (``now``)."""

    cut: datetime | None = None
    healed: datetime | None = None
    passed: datetime | None = None  # the watchdog's last pass as the split healed


def beat_cut_off(split: Split) -> Fault:
    def beat_cut_off(rig: Rig, rng: random.Random) -> datetime:
        """Beat away from the broker for four to five watchdog intervals: no watchdog
        pass is sent, while the chains go on without it."""
        assert rig.namespace is not None
        rig.namespace.cut()
        split.cut = now()
        time.sleep(rng.uniform(4 * WATCHDOG_INTERVAL, 5 * WATCHDOG_INTERVAL))
        split.passed = last_pass(rig)
        rig.namespace.heal()
        split.healed = now()
        return split.healed

    return beat_cut_off


def last_pass(rig: Rig) -> datetime | None:
    with rig.db.connect() as conn:
        return watchdog_passes(conn).passed_at


def test_beat_cut_off_from_the_broker(beat_apart: Rig) -> None:
    """Beat only sends the watchdog: without it no pass runs (no repair is made), but
    no slot waits for one. Once beat is back, passes resume."""
    split = Split()
    _, detail = whole_after(beat_apart, [beat_cut_off(split)], "partition:beat")
    assert split.cut is not None and split.healed is not None and split.passed is not None
    # The last pass sent before the split runs within an interval of it; none after.
    assert split.passed <= split.cut + timedelta(seconds=WATCHDOG_INTERVAL + 1), detail
    # Beat sends again at its next interval once its connection is back, within
    # Celery's first retries (2, 4, 6 s).
    wait_until(
        lambda: (last_pass(beat_apart) or split.cut) > split.healed,
        WATCHDOG_INTERVAL + 15,
        f"a watchdog pass after the split\n{detail}",
    )


@pytest.fixture
def broker_apart(tmp_path: Path) -> Iterator[Rig]:
    """The rig with Redis on a pair of its own, and workers in the namespace (as in
    ``split``) that reach the database over the first pair and Redis over the second."""
    namespace = Namespace.create(links=2)
    with beside(tmp_path, namespace, broker_host=namespace.host_of(1)) as rig:
        yield rig


def cut_off_alone(split: Split, name: str, stop: signal.Signals) -> Fault:
    """The namespace's workers away from the servers of its second pair for three to
    four leases, those of its first still in reach. The rig's own worker of the user's
    tasks stops first (``stop``), so that the namespace's holds some as the split
    comes; it starts again on this side."""

    def fault(rig: Rig, rng: random.Random) -> datetime:
        assert rig.namespace is not None
        rig.cluster.kill("tasks", stop)
        time.sleep(rng.uniform(0.5, 1.0))
        holding(rig)
        rig.namespace.cut(1)
        split.cut = now()
        cut = time.monotonic()
        rig.start_worker("tasks")
        time.sleep(max(0.0, rng.uniform(3 * LEASE, 4 * LEASE) - (time.monotonic() - cut)))
        rig.namespace.heal(1)
        split.healed = now()
        return split.healed

    fault.__name__ = name
    return fault


def test_workers_cut_off_from_the_broker_alone(broker_apart: Rig) -> None:
    """A worker that still reaches the database renews its leases and records its
    outcomes: what it held finishes there, during the split, once; its
    acknowledgements wait for the broker. Nothing is retried for want of a lease."""
    split = Split()
    # Its tasks end, warmly: none lapses.
    cut_off = cut_off_alone(split, "broker_cut_off", signal.SIGTERM)
    _, detail = whole_after(broker_apart, [cut_off], "partition:broker")
    lapsed = lapsed_leases(broker_apart)
    with broker_apart.db.connect() as conn:
        recorded_inside = conn.execute(
            select(func.count()).where(
                invocations.c.worker.like("%\\_ns@%", escape="\\"),
                invocations.c.finished_at.between(split.cut, split.healed),
            )
        ).scalar_one()
    print(f"leases lapsed: {len(lapsed)}; runs the cut-off workers recorded: {recorded_inside}")
    assert lapsed == [], f"a lease lapsed with the database in reach:\n{detail}"
    assert recorded_inside > 0, f"the cut-off workers recorded nothing while cut off\n{detail}"


@pytest.fixture
def database_apart(tmp_path: Path) -> Iterator[Rig]:
    """The rig with PostgreSQL on a pair of its own, and workers in the namespace (as in
    ``split``) that reach Redis and the http endpoint over the first pair and the
    database over the second."""
    with beside(tmp_path, Namespace.create(links=2), pg_link=1) as rig:
        yield rig


def test_workers_cut_off_from_the_database_alone(database_apart: Rig) -> None:
    """A worker that reaches the broker but not the database cannot renew its leases:
    they lapse, and its attempts are retried on this side. It goes on taking messages,
    which wait with it (its queries hang until the split heals, then find their ticks
    superseded and their attempts no longer current), while the watchdog sends what
    they held again. Every slot once, each attempt's work done once."""
    split = Split()
    cut_off = cut_off_alone(split, "database_cut_off", signal.SIGKILL)
    _, detail = whole_after(database_apart, [cut_off], "partition:database")
    lapsed = len(lapsed_leases(database_apart))
    print(f"leases lapsed and retried: {lapsed}")
    assert lapsed > 0, f"the cut-off workers held no attempt:\n{detail}"
