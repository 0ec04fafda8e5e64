"""PostgreSQL's plans of what cronchain runs: a registry filled in bulk, the statements a
piece of work sends, and how each is carried out. For the tests that keep hot queries on
their indexes, and for ``bench.registry_scale``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy


def fill_registry(db: sqlalchemy.Engine, count: int, runs_each: int) -> None:
    """``count`` jobs of project ``p``, every other one parked (its deadline before its
    slot) and the rest sent, their slots and deadlines ahead of the database's clock,
    with ``runs_each`` SUCCEEDED runs each; then ANALYZE, as autovacuum would have."""
    with db.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision, enabled,"
            " paused, state, generation, tick_at, tick_nonce, watchdog_at, invocation_running,"
            " overruns, active, buffered, created_at, updated_at) SELECT 'p', 'j' || g, 'noop',"
            " 'every 10s', 'UTC', '{}', 'r', true, false, 'SCHEDULED', 0,"
            " now() + g * interval '1 s', g, now() + g * interval '1 s'"
            " - mod(g, 2) * interval '5 min', false, 0, 0, 0, now(),"
            " now() FROM generate_series(1, %(count)s) g",
            {"count": count},
        )
        conn.exec_driver_sql(
            "INSERT INTO invocations (job_id, slot, revision, status, attempt, created_at,"
            " started_at, finished_at, backfill, filed_at) SELECT j.id, now() - s * interval"
            " '10 s', 'r', 'SUCCEEDED', 1, now(), now(), now(), false, now() - s * interval"
            " '10 s' FROM jobs j, generate_series(1, %(runs)s) s",
            {"runs": runs_each},
        )
    with db.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")


def selects(db: sqlalchemy.Engine, work: Callable[[], object]) -> list[tuple[str, Any]]:
    """The SELECTs ``work`` sent through ``db``, with their parameters, as the driver got
    them."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sqlalchemy.event.listen(db, "before_cursor_execute", record)
    try:
        work()
    finally:
        sqlalchemy.event.remove(db, "before_cursor_execute", record)
    return seen


def plan(
    conn: sqlalchemy.Connection, statement: str, parameters: Any, *, analyze: bool = False
) -> dict[str, Any]:
    """The plan's top node, as ``EXPLAIN (FORMAT JSON)`` gives it; with ``analyze``, run
    for real, with the pages it touched (``BUFFERS``)."""
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    explained = conn.exec_driver_sql(f"EXPLAIN ({options}) {statement}", parameters)
    return explained.scalar_one()[0]["Plan"]


def pages(top: dict[str, Any]) -> int:
    """The pages a plan run with ``analyze`` touched, found in the cache or read."""
    return top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)


def nodes(top: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan."""
    found, stack = [], [top]
    while stack:
        node = stack.pop()
        stack += node.get("Plans", [])
        found.append(node)
    return found


def scans(top: dict[str, Any]) -> list[str]:
    """Each scan of a plan, as ``Node Type(index or table)``."""
    return sorted(
        f"{node['Node Type']}({node.get('Index Name') or node.get('Relation Name')})"
        for node in nodes(top)
        if "Scan" in node["Node Type"]
    )


def tables_read_whole(top: dict[str, Any]) -> set[str]:
    """The tables (or partitions) a plan reads with a sequential scan."""
    return {s[len("Seq Scan(") : -1] for s in scans(top) if s.startswith("Seq Scan(")}


def log_plans(
    connection: psycopg.Connection,
    plans: list[dict[str, Any]],
    *,
    local: bool,
    nested: bool,
    analyze: bool = False,
) -> None:
    """Have ``connection``'s server send the plan of each statement it runs, as it ran
    (``auto_explain``, as JSON), to ``plans``: for this transaction (``local``) or the
    session; with ``nested``, the statements of functions and triggers too; with
    ``analyze``, with the rows and loops of each node (which says what was never run)."""

    def logged(diagnostic: psycopg.errors.Diagnostic) -> None:
        _, said, plan = (diagnostic.message_primary or "").partition("plan:")
        if said:  # auto_explain's
            plans.append(json.loads(plan))

    connection.add_notice_handler(logged)
    scope = "SET LOCAL" if local else "SET"
    connection.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        f"auto_explain.log_nested_statements = {'on' if nested else 'off'}",
        "auto_explain.log_format = json",
        f"auto_explain.log_analyze = {'on' if analyze else 'off'}",
        "auto_explain.log_timing = off",
        "client_min_messages = log",
    ):
        connection.execute(f"{scope} {setting}")
