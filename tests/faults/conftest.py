"""Fixtures of the fault suite, and its summary: one line per fault at the end of the run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.rig import Rig
from tests.services import RedisServer, postgres_server

SUMMARY: list[str] = []


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARY:
        terminalreporter.section("fault suite ledger")
        for line in SUMMARY:
            terminalreporter.write_line(line)


def fault_seed() -> int:
    """``CRONCHAIN_FAULT_SEED`` replays a run; otherwise each run draws its own."""
    return int(os.environ.get("CRONCHAIN_FAULT_SEED") or int.from_bytes(os.urandom(4)))
