"""The hot path's batch statements send a column NULL in every row as no array at all
(``bulk.unnested``): ``unnest`` pads it with NULLs, so the rows written are the same."""

from __future__ import annotations

import sqlalchemy
from sqlalchemy import select, update

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.storage import bulk
from cronchain.scheduler.storage.models import jobs
from tests.support.jobs import apply, make


def test_a_column_null_in_every_row_is_set_null(engine: Engine, db: sqlalchemy.Engine) -> None:
    apply(engine, *(make(name=f"j{n}") for n in range(3)))
    with engine.transaction() as conn:
        conn.execute(update(jobs).values(pause_reason="before"))
        ids = conn.execute(select(jobs.c.id).order_by(jobs.c.id)).scalars().all()
        rows = [{"b_id": id_, "pause_reason": None, "overruns": n} for n, id_ in enumerate(ids)]
        assert bulk.update_joined(conn, jobs, rows, {"b_id": "id"}) == 3
    with db.connect() as conn:
        written = conn.execute(select(jobs.c.pause_reason, jobs.c.overruns).order_by(jobs.c.id))
        assert [tuple(r) for r in written] == [(None, 0), (None, 1), (None, 2)]


def test_an_array_is_left_out_only_when_every_value_is_null() -> None:
    assert bulk.unnested([None, None]) is None
    assert bulk.unnested([None, 0]) == [None, 0]
    assert bulk.unnested([False]) == [False]
