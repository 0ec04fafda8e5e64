"""Fixtures of the fault suite (its ledger is printed by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.rig import Rig, running
from tests.support.services import postgres_server


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with postgres_server() as pg, running(tmp_path, pg) as rig:
        yield rig
