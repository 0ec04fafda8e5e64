"""A batch's statements (a tick batch's, a claim's, an outcome group's) read their rows by
key, whatever the planner's statistics say (``storage.statistics.keyed``): left to its
costs, PostgreSQL read the month's runs and every job whole for each batch of a hundred,
up to tens of thousands of rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.storage import partitions, statistics
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.workers import work
from tests.support.deliver import sent
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.jobs import apply, make
from tests.support.plans import log_plans, nodes, scans, tables_read_whole

pytestmark = pytest.mark.postgres

JOBS = 1000  # ten batches; a month holding three runs of each, analyzed


@contextmanager
def plans_of(db: sqlalchemy.Engine, analyze: bool = False) -> Iterator[list[dict[str, Any]]]:
    """The plan of each statement run through ``db`` meanwhile, as it ran, triggers'
    statements included (``analyze``: with what each node did)."""
    plans: list[dict[str, Any]] = []

    def explaining(connection: psycopg.Connection, _record: Any) -> None:
        log_plans(connection, plans, local=False, nested=True, analyze=analyze)
        connection.commit()

    db.dispose()
    sqlalchemy.event.listen(db, "connect", explaining)
    try:
        yield plans
    finally:
        sqlalchemy.event.remove(db, "connect", explaining)
        db.dispose()


def read_whole(plans: list[dict[str, Any]], filled: set[str]) -> list[tuple[str, list[str]]]:
    """Each statement that read a filled table whole, or joined by hashing or merging
    (which reads one side whole), with its scans."""
    found = []
    for explained in plans:
        top = explained["Plan"]
        joins = {node["Node Type"] for node in nodes(top)} & {"Hash Join", "Merge Join"}
        if tables_read_whole(top) & filled or joins:
            found.append((" ".join(explained["Query Text"].split())[:60], scans(top)))
    return found


def succeeded_runs(conn: sqlalchemy.Connection, slots: list[datetime]) -> None:
    """A SUCCEEDED run of every job at each of ``slots``, as history holds them."""
    conn.exec_driver_sql(
        "INSERT INTO invocations (job_id, slot, revision, status, attempt, created_at,"
        " started_at, finished_at, backfill, filed_at) SELECT j.id, s, j.revision,"
        " 'SUCCEEDED', 1, s, s, s, false, s FROM jobs j, unnest(%(slots)s::timestamptz[]) s",
        {"slots": slots},
    )


def herd_plans(pg_url: str, clock: Clock) -> tuple[list[dict[str, Any]], set[str]]:
    """The plans of a herd of ``JOBS`` no-ops fed, claimed and recorded in batches of a
    hundred, half of them (those that sleep) recorded by outcome groups; and the tables
    that hold rows."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock)
    try:
        apply(engine, *(make(name=f"j{n}", sleep=0.01 * (n % 2)) for n in range(JOBS)))
        with db.begin() as conn:  # the month so far: three runs of each job, analyzed
            succeeded_runs(conn, [clock.now - timedelta(seconds=10 * s) for s in (1, 2, 3)])
        with db.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
            query = "SELECT DISTINCT tableoid::regclass::text FROM invocations"
            filled = {"jobs"} | {name for (name,) in conn.exec_driver_sql(query)}
        clock.advance(10)
        ticks = sent(port)
        with plans_of(db) as plans:
            for i in range(0, len(ticks), 100):
                engine.tick_many(ticks[i : i + 100], start_here=True)
            attempts = [c.ref for c in port.runs]  # as the work path's messages name them
            for i in range(0, len(attempts), 100):
                work.execute_batch(engine, attempts[i : i + 100], "w", threads=10)
    finally:
        db.dispose()
    return plans, filled


def test_a_batch_reads_its_rows_by_key(pg_url: str, clock: Clock):
    plans, filled = herd_plans(pg_url, clock)
    texts = " ".join(p["Query Text"] for p in plans)
    for statement in ("INSERT INTO invocations", "UPDATE invocations", "UPDATE jobs"):
        assert statement in texts  # each part of the path was planned here
    assert read_whole(plans, filled) == []


def test_left_to_its_costs_the_planner_reads_a_batchs_tables_whole(
    pg_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """What the test above would see without ``keyed``: it is not the statistics."""
    monkeypatch.setattr(statistics, "keyed", lambda conn, rows: None)
    plans, filled = herd_plans(pg_url, clock)
    whole = {text for text, _ in read_whole(plans, filled)}
    assert any(t.startswith("SELECT jobs.id") for t in whole)  # the claim's lock
    assert any(t.startswith("UPDATE invocations") for t in whole)  # the outcomes
    assert any(t.startswith("UPDATE jobs AS t") for t in whole)  # the jobs saved


def months_read(plans: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each statement that read more than one partition of ``invocations``, with them (a
    scan pruned as the statement started is not in its plan; one that found nothing to
    read was never run)."""
    found = []
    for explained in plans:
        read = {
            node["Relation Name"]
            for node in nodes(explained["Plan"])
            if node.get("Relation Name", "").startswith("invocations_") and node["Actual Loops"] > 0
        }
        if len(read) > 1:
            found.append((" ".join(explained["Query Text"].split())[:60], sorted(read)))
    return found


def most_read(plans: list[dict[str, Any]], than: int) -> list[tuple[str, int]]:
    """Each statement that read more than ``than`` rows of ``invocations`` in one scan,
    kept or thrown away, over all its loops, with how many."""
    found = []
    for explained in plans:
        for node in nodes(explained["Plan"]):
            if not node.get("Relation Name", "").startswith("invocations_"):
                continue
            kept, dropped = node["Actual Rows"], node.get("Rows Removed by Filter", 0)
            read = round((kept + dropped) * node["Actual Loops"])
            if read > than:
                found.append((" ".join(explained["Query Text"].split())[:60], read))
    return found


def test_a_run_is_found_in_its_own_month(pg_url: str, clock: Clock):
    """A lone run is found by its id and where it is filed, on the work path and wherever
    the control path has it by id: PostgreSQL then reads that month's partition alone,
    not each of the half year of history that retention keeps (an index probe apiece,
    each statement, each run), and in it the run alone. (A batch's runs are found by
    their ids: ``_FILED``'s comment in ``run_store`` says why.)"""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock)
    try:
        apply(engine, *(make(name=f"j{n}", sleep=0.01 * (n % 2)) for n in range(300)))
        with db.begin() as conn:  # this month, and six of history with a run of each job
            this_month = partitions.month_start(clock.now)
            partitions.create(conn, partitions.month_of(this_month))
            for back in range(1, 7):
                month = partitions.month_of(partitions.add_months(this_month, -back))
                partitions.create(conn, month)
                succeeded_runs(conn, [month.start])
        with db.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
        clock.advance(10)
        ticks = sent(port)
        with plans_of(db) as herd:
            for i in range(10, len(ticks), 100):  # a herd, in batches
                engine.tick_many(ticks[i : i + 100], start_here=True)
            attempts = [c.ref for c in port.runs]
            for i in range(0, len(attempts), 100):
                work.execute_batch(engine, attempts[i : i + 100], "w", threads=10)
        with plans_of(db, analyze=True) as alone:
            sent_before = len(port.runs)
            for job_id, nonce in ticks[:10]:  # then alone, as spread slots come
                engine.tick(job_id, nonce, start_here=True)
            for call in port.runs[sent_before:]:
                work.execute(engine, *call.ref[:2], "w", call.job_id, call.filed_at)
    finally:
        db.dispose()
    texts = " ".join(p["Query Text"] for p in alone)
    assert "UPDATE invocations" in texts and "FOR NO KEY UPDATE" in texts
    assert months_read(alone) == []
    # Nor more of the month than its run: a herd's runs share one second, and a plan
    # led by the place (chosen when the month's statistics say it is small, as they do
    # here: it was analyzed empty) read the whole herd for each run that came after it.
    assert most_read(alone, than=1) == []
    assert "UPDATE invocations" in " ".join(p["Query Text"] for p in herd)
