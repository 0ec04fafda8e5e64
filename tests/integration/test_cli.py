"""The ``cronchain`` command as an operator runs it: a real process, a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy

from tests.support import services
from tests.support.cli import DEMO_FILE, process_cli

pytestmark = pytest.mark.postgres


@pytest.fixture
def cli(pg_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    with process_cli(pg_url, tmp_path) as run:
        yield run


def test_apply_jobs_history_and_commands(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "jobs.yaml"
    path.write_text(DEMO_FILE)
    assert "would be created: 2" in cli("apply", str(path), "--dry-run").stdout
    assert json.loads(cli("jobs", "--json").stdout) == []
    out = cli("apply", str(path), "-v").stdout
    assert "created: 2\n  demo/ping\n  demo/nightly\n" in out
    assert cli("apply", str(path)).stdout.endswith("unchanged: 2\n")  # counts alone

    listed = json.loads(cli("jobs", "--json").stdout)
    assert [j["id"] for j in listed] == ["demo/nightly", "demo/ping"]
    nightly = listed[0]
    assert set(nightly) >= {
        "id",
        "state",
        "schedule",
        "timezone",
        "next_tick",
        "paused",
        "revision",
    }
    assert nightly["state"] == "SCHEDULED" and nightly["timezone"] == "Europe/Berlin"
    assert (nightly["days"], listed[1]["days"]) == ("both", "either")
    assert "0 2 * * * (days: both)" in cli("jobs").stdout
    assert nightly["next_tick"].endswith(("T01:00:00Z", "T00:00:00Z"))  # 02:00 in Berlin

    assert "invocation" in cli("trigger", "demo/nightly").stdout
    assert "skipped (overlap)" in cli("trigger", "demo/nightly").stdout  # one is active
    header, *lines = cli("history", "demo/nightly").stdout.splitlines()
    assert header.split()[3:5] == ["status", "reason"], header
    assert lines[0].split()[2:4] == ["SKIPPED", "overlap"], lines  # a manual run: no slot
    history = json.loads(cli("history", "demo/nightly", "--json").stdout)[1:]
    assert [(h["job"], h["slot"], h["status"]) for h in history] == [
        ("demo/nightly", None, "STARTING")
    ]
    assert set(history[0]) >= {
        "id",
        "job",
        "slot",
        "status",
        "attempt",
        "started_at",
        "finished_at",
        "error",
    }

    cli("pause", "demo/ping", "--reason", "maintenance")
    ping = json.loads(cli("jobs", "--json").stdout)[1]
    assert (ping["paused"], ping["pause_reason"]) == (True, "maintenance")
    assert "cannot trigger a job that is SUSPENDED" in cli("trigger", "demo/ping", code=2).stderr
    cli("resume", "demo/ping")
    assert "no job named 'demo/nope'" in cli("trigger", "demo/nope", code=2).stderr


def test_bad_files_exit_2_and_write_nothing(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.yaml"
    path.write_text(DEMO_FILE + "  - name: broken\n    schedule: '99 * * * *'\n    noop: {}\n")
    err = cli("apply", str(path), code=2).stderr
    assert f"{path}: job 'broken': schedule:" in err
    assert json.loads(cli("jobs", "--json").stdout) == []


def test_next_in_a_time_zone(cli):  # type: ignore[no-untyped-def]
    out = cli(
        "next",
        "0 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-03-28T00:00Z",
        "--count",
        "3",
        "--json",
    ).stdout
    rows = [{k: v for k, v in r.items() if k != "transitions"} for r in json.loads(out)]
    assert rows == [
        {"utc": "2026-03-28T01:00:00Z", "local": "2026-03-28T02:00:00+01:00"},
        # 02:00 does not exist on the spring-forward day: the first instant after the gap.
        {"utc": "2026-03-29T01:00:00Z", "local": "2026-03-29T03:00:00+02:00"},
        {"utc": "2026-03-30T00:00:00Z", "local": "2026-03-30T02:00:00+02:00"},
    ]
    assert "has no time zone" in cli("next", "@daily", "--after", "2026-01-01", code=2).stderr
    crossed = [r["transitions"] for r in json.loads(out)]
    assert crossed == [[], [{"at": "2026-03-29T01:00:00Z", "from": "+01:00", "to": "+02:00"}], []]


def test_db_upgrade_on_an_empty_database(pg_admin, tmp_path: Path):  # type: ignore[no-untyped-def]
    name = services.create_database(pg_admin)
    try:
        env = dict(
            os.environ,
            CRONCHAIN_DATABASE_URL=services.database_url(name),
            CRONCHAIN_HOME=str(tmp_path),
        )
        for _ in range(2):  # a second upgrade is a no-op
            done = subprocess.run(
                [sys.executable, "-m", "cronchain.scheduler.cli", "db", "upgrade"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        engine = sqlalchemy.create_engine(services.database_url(name))
        assert {"jobs", "invocations"} <= set(sqlalchemy.inspect(engine).get_table_names())
        engine.dispose()
    finally:
        services.drop_database(pg_admin, name)


def test_abort_and_one_invocation_with_its_log(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "jobs.yaml"
    path.write_text("project: demo\njobs:\n  - {name: slow, schedule: triggered, noop: {}}\n")
    cli("apply", str(path))
    cli("trigger", "demo/slow")  # no worker runs here: the invocation stays STARTING
    [row] = json.loads(cli("history", "demo/slow", "--json").stdout)
    # how many of each status, with their ids (issue 15)
    aborted = cli("abort", "demo/slow").stdout.strip()
    assert aborted == f"demo/slow: aborted 1 starting ({row['id']})"
    detail = json.loads(
        cli("history", "demo/slow", "--invocation", str(row["id"]), "--json").stdout
    )
    assert (detail["status"], detail["reason"], detail["attempts"]) == ("ABORTED", "aborted", [])
    assert "aborted by a user" in detail["log"]
    text = cli("history", "--invocation", str(row["id"])).stdout
    assert "status: ABORTED" in text and "log:" in text
    again = cli("abort", "--invocation", str(row["id"])).stdout.strip()
    assert again.endswith("nothing active or waiting")  # issue 15: waiting runs count too
    assert "one of them" in cli("abort", code=2).stderr
    assert "no invocation 999" in cli("history", "--invocation", "999", code=2).stderr


def test_time_commands(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    """next shows the DST transition it crosses; pause/resume --catch-up, backfill
    --dry-run and twice, explain, apply --prune, each as an operator types them."""
    out = cli("next", "30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00Z")
    lines = out.stdout.splitlines()
    assert lines[0] == "-- DST: clocks move from +01:00 to +02:00 at 2026-03-29T01:00:00Z"
    assert lines[1] == "2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00"

    path = tmp_path / "jobs.yaml"
    path.write_text(DEMO_FILE)
    cli("apply", str(path))
    cli("pause", "demo/ping", "--reason", "deploy")
    assert "resumed, catching up" in cli("resume", "demo/ping", "--catch-up").stdout

    window = ("--from", "2026-01-01T00:00Z", "--to", "2026-01-03T00:00Z")
    dry = json.loads(cli("backfill", "demo/nightly", *window, "--dry-run", "--json").stdout)
    assert dry["slots"] == ["2026-01-01T01:00:00Z", "2026-01-02T01:00:00Z"]
    assert "created 2 invocations" in cli("backfill", "demo/nightly", *window).stdout
    again = cli("backfill", "demo/nightly", *window, "--max-concurrent", "2").stdout
    assert "created 0 invocations" in again and "2 slots have an invocation already" in again

    explained = cli("explain", "demo/nightly", "--at", "2026-01-02T01:00Z").stdout
    # Not "ran" (issue 15 review): no worker runs here, so the backfill's run is sent only.
    assert "the slot's invocation 2 (a backfill's) is starting" in explained
    off = json.loads(cli("explain", "nightly", "--at", "2030-01-01T00:30Z", "--json").stdout)
    assert off["answer"] == "not_a_slot"
    assert cli(
        "backfill", "ping", "--from", "2026-01-01T00:00Z", "--to", "2025-01-01T00:00Z", code=2
    )

    path.write_text(DEMO_FILE.split("  - name: nightly")[0])
    out = json.loads(cli("apply", str(path), "--prune", "--json").stdout)
    assert out["projects"]["demo"]["deleted"] == ["demo/nightly"] and not out["dry_run"]
    assert [j["id"] for j in json.loads(cli("jobs", "--json").stdout)] == ["demo/ping"]
