"""An idle watchdog pass on 10,000 jobs and 20,000 runs reads indexes, not tables: at a
million jobs a table read whole is a pass of a second, every interval."""

from __future__ import annotations

import pytest

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage.db import make_engine
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.plans import fill_registry, pages, plan, scans, selects, tables_read_whole

pytestmark = pytest.mark.postgres


def test_an_idle_pass_reads_no_table_whole(pg_url: str, clock: Clock):
    """Every statement of the pass, the features' sweeps' too. The planner has no
    statistics of a JSON expression and guessed that nearly every job has alerts: asked
    for the first, it read the whole registry to find none."""
    db = make_engine(pg_url)
    fill_registry(db, 10_000, runs_each=2)
    engine = Engine(db, RecordingPort(), default_invokers(), grace=GRACE, clock=clock)
    ran = selects(db, lambda: watchdog.run_once(engine))  # idle: the test's clock is in 2026-03
    assert len(ran) > 5, ran
    with db.connect() as conn:
        query = "SELECT DISTINCT tableoid::regclass::text FROM invocations"
        filled = {name for (name,) in conn.exec_driver_sql(query)}  # an empty one may be read
        for statement, parameters in ran:
            # Run for real (idle, it locks nothing): a plan may read a table whole along
            # an index too, which only the pages it touched tell.
            top = plan(conn, statement, parameters, analyze=True)
            assert not tables_read_whole(top) & {"jobs", *filled}, (statement, scans(top))
            assert pages(top) <= 10, (statement, scans(top), pages(top))
    db.dispose()
