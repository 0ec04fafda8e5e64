"""A PostgreSQL failover under a running deployment: the primary is killed and its
streaming replica promoted, with cronchain reaching both through one multi-host URL
(``target_session_attrs=read-write``), as a user's failover setup names them.

Synchronous replication loses no commit, and the ledger is whole. Asynchronous
replication loses the transactions the replica had not received: the test makes that
tail seconds long (the replica is down while the primary goes on) and checks what the
manual states for it (docs/concepts/exactly-once.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.faults.rig import Rig, running, whole_after
from tests.support.services import postgres_server

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.faults]


@pytest.fixture(params=["synchronous", "asynchronous"])
def replicated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    with postgres_server() as pg:
        standby = pg.replica()
        if request.param == "synchronous":
            pg.synchronous()
        try:
            with running(tmp_path, pg, standby=standby) as rig:
                yield rig
        finally:
            standby.destroy()


def failover(rig: Rig, rng: random.Random) -> datetime:
    """The primary dies (``pg_ctl stop -m immediate``), and a moment later its replica is
    promoted; the old primary never comes back."""
    assert rig.standby is not None
    rig.pg.stop("immediate")
    time.sleep(rng.uniform(0.5, 2.0))
    rig.standby.promote()
    rig.db.dispose()  # the test's own reads: its pooled connections were to the primary
    return datetime.now().astimezone()


def failover_behind(rig: Rig, rng: random.Random) -> datetime:
    """As ``failover``, with the replica seconds behind: it is down while the primary
    commits on, then comes back without it and is promoted. What the primary committed
    in between is gone, as it is when asynchronous replication lags."""
    assert rig.standby is not None
    behind = time.time()  # what commits while it stops may not reach it either
    rig.standby.stop()
    time.sleep(rng.uniform(2.0, 4.0))
    rig.pg.stop("immediate")
    rig.standby.start()  # read-only until promoted: nothing commits in between
    rig.forgotten = (behind, time.time())
    rig.standby.promote()
    rig.db.dispose()
    return datetime.now().astimezone()


def test_failover(replicated: Rig, request: pytest.FixtureRequest) -> None:
    mode = request.node.callspec.params["replicated"]
    fault = failover if mode == "synchronous" else failover_behind
    ledger, detail = whole_after(replicated, [fault], f"failover_{mode}")
    if mode == "asynchronous":  # the replica was seconds behind: some work was forgotten
        assert ledger.redone > 0, detail
