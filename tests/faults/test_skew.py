"""Clocks that disagree: control workers, the work path and the user's workers each a
30 s off the machine's clock (libfaketime), one ahead and one behind, beat on time.

Each decision that compares instants written by different machines (a slot due, a lease
lapsed, a timeout) reads one clock, the database's; what reads a machine's own clock
(Celery's ETAs) can only make a run late. Checked: no run starts before its slot (each
``http`` call's arrival, by the test's own clock, against the slot its key names), no
lease is taken from a live attempt, and the ledger is whole.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.faults.rig import Rig, lapsed_leases, running, whole_after
from tests.support.services import postgres_server

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.faults]

SKEW = {"worker": "+30s", "worker2": "-30s", "work": "+30s", "tasks": "-30s"}
EARLY = 0.5  # seconds a call may come before its slot: the test's and the database's clocks


@pytest.fixture
def skewed(tmp_path: Path) -> Iterator[Rig]:
    def skew(rig: Rig) -> None:
        rig.cluster.skew = SKEW

    with postgres_server() as pg, running(tmp_path, pg, skew) as rig:
        yield rig


def second_control_worker(rig: Rig, rng: random.Random) -> datetime:
    """A control worker 30 s behind beside the one 30 s ahead, for a while."""
    rig.start_worker("worker2", "cronchain")
    time.sleep(rng.uniform(8.0, 10.0))
    return datetime.now(UTC)


def slot_of(key: str) -> datetime:
    return datetime.strptime(key.rsplit("/", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_skewed_clocks(skewed: Rig) -> None:
    whole_after(skewed, [second_control_worker], "skewed_clocks")
    early = [
        (call.key, round(slot_of(call.key).timestamp() - call.at, 1))
        for call in skewed.endpoint.received
        if call.at < slot_of(call.key).timestamp() - EARLY
    ]
    assert early == [], f"calls made before their slot (key, seconds early): {early[:10]}"
    lapsed = lapsed_leases(skewed)
    assert lapsed == [], f"leases taken from live attempts: {lapsed[:5]}"
