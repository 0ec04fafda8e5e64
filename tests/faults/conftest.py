"""Fixtures of the fault suite, and its summary: one line per fault at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.rig import SUMMARY, Rig
from tests.services import RedisServer, postgres_server


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
