"""Fixtures of the fault suite (its ledger is printed by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.rig import Rig
from tests.support.services import RedisServer, postgres_server


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with postgres_server() as pg:
        redis = RedisServer(tmp_path)
        redis.start()
        rig = Rig(tmp_path, pg, redis)
        try:
            rig.up()
            yield rig
        finally:
            rig.down()
            redis.stop()
