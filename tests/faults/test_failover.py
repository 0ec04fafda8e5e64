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
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.faults.rig import Rig, running, whole_after
from tests.support.services import free_port, postgres_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.faults]


@pytest.fixture(params=["synchronous", "asynchronous"])
def replicated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Rig, int]]:
    """The rig on a primary and its streaming replica, and ``cronchain serve`` (its
    port) beside it."""
    with postgres_server() as pg:
        standby = pg.replica()
        if request.param == "synchronous":
            pg.synchronous()
        try:
            with running(tmp_path, pg, standby=standby) as rig:
                port = free_port()
                rig.cluster.start("serve", *SERVE, str(port))
                wait_until(lambda: healthz(port)[0] == 200, 60, "serve to be healthy")
                yield rig, port
        finally:
            standby.destroy()


SERVE = (sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--port")


def healthz(port: int) -> tuple[int, str]:
    """``cronchain serve``'s health: 200 once every check passes, which reads the
    database."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


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


def test_failover(replicated: tuple[Rig, int], request: pytest.FixtureRequest) -> None:
    mode = request.node.callspec.params["replicated"]
    fault = failover if mode == "synchronous" else failover_behind
    rig, port = replicated
    ledger, detail = whole_after(rig, [fault], f"failover_{mode}")
    # serve, started before the failover, answers from the new primary (the rig checked
    # that no process of it died).
    wait_until(lambda: healthz(port)[0] == 200, 30, f"serve healthy again\n{detail}")
    if mode == "asynchronous":  # the replica was seconds behind: some work was forgotten
        assert ledger.redone > 0, detail
