"""The ``cronchain`` command as an operator runs it: a real process, a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy

from tests import services

pytestmark = pytest.mark.postgres

FILE = """
project: demo
jobs:
  - name: ping
    schedule: every 5s
    noop: {}
  - name: nightly
    schedule: "0 2 * * *"
    timezone: Europe/Berlin
    noop: {}
"""


@pytest.fixture
def cli(pg_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    env = dict(os.environ, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_HOME=str(tmp_path / "home"))
    env.pop("CRONCHAIN_BROKER_URL", None)  # messages go to the embedded filesystem broker

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "scheduler.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert done.returncode == code, done.stderr
        return done

    return run


def test_apply_jobs_history_and_commands(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "jobs.yaml"
    path.write_text(FILE)
    assert "would be created: 2" in cli("apply", str(path), "--dry-run").stdout
    assert json.loads(cli("jobs", "--json").stdout) == []
    out = cli("apply", str(path)).stdout
    assert "created: 2 (demo/ping, demo/nightly)" in out
    assert "unchanged: 2" in cli("apply", str(path)).stdout

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
    assert nightly["next_tick"].endswith(("T01:00:00Z", "T00:00:00Z"))  # 02:00 in Berlin

    assert "invocation" in cli("trigger", "demo/nightly").stdout
    history = json.loads(cli("history", "demo/nightly", "--json").stdout)
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
    path.write_text(FILE + "  - name: broken\n    schedule: '99 * * * *'\n    noop: {}\n")
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
    assert json.loads(out) == [
        {"utc": "2026-03-28T01:00:00Z", "local": "2026-03-28T02:00:00+01:00"},
        # 02:00 does not exist on the spring-forward day: the first instant after the gap.
        {"utc": "2026-03-29T01:00:00Z", "local": "2026-03-29T03:00:00+02:00"},
        {"utc": "2026-03-30T00:00:00Z", "local": "2026-03-30T02:00:00+02:00"},
    ]
    assert "has no time zone" in cli("next", "@daily", "--after", "2026-01-01", code=2).stderr


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
                [sys.executable, "-m", "scheduler.cli", "db", "upgrade"],
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
    assert cli("abort", "demo/slow").stdout.strip() == f"demo/slow: aborted {row['id']}"
    detail = json.loads(
        cli("history", "demo/slow", "--invocation", str(row["id"]), "--json").stdout
    )
    assert (detail["status"], detail["reason"], detail["attempts"]) == ("ABORTED", "aborted", [])
    assert "aborted by a user" in detail["log"]
    text = cli("history", "--invocation", str(row["id"])).stdout
    assert "status: ABORTED" in text and "log:" in text
    assert cli("abort", "--invocation", str(row["id"])).stdout.strip().endswith("nothing active")
    assert "one of them" in cli("abort", code=2).stderr
    assert "no invocation 999" in cli("history", "--invocation", "999", code=2).stderr
