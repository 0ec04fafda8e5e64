"""``HeldWrites``: a run updated twice in one group is written once, as the two updates
in order would leave it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cronchain.scheduler.core import outcome_batch
from cronchain.scheduler.core.outcome_batch import HeldWrites
from cronchain.scheduler.storage.rows import InvocationRow

FILED = datetime(2026, 3, 1, tzinfo=UTC)


def run(id_: int) -> InvocationRow:
    return InvocationRow(
        id_,
        1,
        FILED,
        None,
        "r",
        "RUNNING",
        1,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        False,
        filed_at=FILED,
    )


def test_a_second_update_of_a_run_joins_its_first(monkeypatch: pytest.MonkeyPatch):
    statements: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(
        outcome_batch.run_store, "update_invocations", lambda conn, rows: statements.append(rows)
    )
    monkeypatch.setattr(outcome_batch.job_store, "save_jobs", lambda *args, **kwargs: None)
    held = HeldWrites()
    held.update_run(run(1), worker="w", log="claimed")  # a claim...
    held.update_run(run(2), worker="w", log="claimed")
    held.update_run(run(1), status="SUCCEEDED", log="claimed, succeeded")  # ...and its end
    held.write(conn=None)  # type: ignore[arg-type]
    assert sorted(statements, key=len) == [
        [{"b_id": 2, "b_filed": FILED, "worker": "w", "log": "claimed"}],
        [
            {
                "b_id": 1,
                "b_filed": FILED,
                "worker": "w",
                "log": "claimed, succeeded",
                "status": "SUCCEEDED",
            }
        ],
    ]
    statements.clear()
    held.write(conn=None)  # type: ignore[arg-type]
    assert statements == []  # written once
