"""The command line's habits (issue 35): ``--version``; ``--json`` on every command that
reports a result; a suggestion for a misspelt command, option, job or zone; a closed pipe
ends quietly; ``apply`` prints counts (names behind ``-v``); ``history`` pages with
``--before`` and writes CSV; every option has help, with no markup in it."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cronchain.scheduler.cli import main as cronchain_cli
from cronchain.scheduler.version import VERSION
from tests.support.cli import DEMO_FILE, process_cli

pytestmark = pytest.mark.postgres


@pytest.fixture
def cli(pg_url: str, tmp_path: Path) -> Any:
    with process_cli(pg_url, tmp_path) as run:
        yield run


def applied(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(DEMO_FILE)
    cli("apply", str(path))


def test_version(cli: Any):
    assert cli("--version").stdout == f"cronchain {VERSION}\n"


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["histroy"], "did you mean 'history'?"),
        (["history", "--lmit", "5"], "did you mean '--limit'?"),
        (["pool", "lsit"], "did you mean 'list'?"),
        (["health", "--check", "databse"], "did you mean 'database'?"),
        (["trigger", "demo/pnig"], "no job named 'demo/pnig'; did you mean 'demo/ping'?"),
        (["pause", "nightyl"], "no job named 'nightyl'; did you mean 'demo/nightly'?"),
        (["next", "0 * * * *", "--tz", "Europe/Berln"], "did you mean 'Europe/Berlin'?"),
    ],
)
def test_a_misspelling_says_what_was_meant(cli: Any, tmp_path: Path, argv: list[str], meant: str):
    applied(cli, tmp_path)
    done = cli(*argv, code=2)
    assert meant in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_every_command_that_reports_a_result_prints_json(cli: Any, tmp_path: Path):
    path = tmp_path / "jobs.yaml"
    path.write_text(DEMO_FILE)
    assert json.loads(cli("db", "upgrade", "--json").stdout)["revision"]
    made = json.loads(cli("apply", str(path), "--json").stdout)
    assert made == {
        "dry_run": False,
        "projects": {
            "demo": {
                "created": ["demo/ping", "demo/nightly"],
                "updated": [],
                "disabled": [],
                "unchanged": [],
            }
        },
    }
    started = json.loads(cli("trigger", "demo/ping", "--json").stdout)
    assert started["job"] == "demo/ping" and started["result"] == "started"
    paused = json.loads(cli("pause", "demo/ping", "--reason", "deploy", "--json").stdout)
    assert paused == {"job": "demo/ping", "paused": True, "reason": "deploy"}
    resumed = json.loads(cli("resume", "demo/ping", "--json").stdout)
    assert resumed == {"job": "demo/ping", "paused": False, "catch_up": False}
    aborted = json.loads(cli("abort", "demo/ping", "--json").stdout)
    assert aborted["job"] == "demo/ping" and started["invocation"] in sum(
        aborted["aborted"].values(), []
    )
    assert json.loads(cli("pool", "set", "gpu", "2", "--json").stdout) == {"pool": "gpu", "size": 2}


def test_apply_prints_counts_and_names_behind_verbose(cli: Any, tmp_path: Path):
    path = tmp_path / "jobs.yaml"
    path.write_text(DEMO_FILE)
    assert cli("apply", str(path), "--dry-run").stdout.splitlines() == [
        "would be created: 2",
        "would be updated: 0",
        "would be disabled: 0",
        "would be unchanged: 0",
    ]
    out = cli("apply", str(path), "-v").stdout
    assert out.startswith("created: 2\n  demo/ping\n  demo/nightly\nupdated: 0\n")


def test_history_pages_with_before_and_writes_csv(cli: Any, tmp_path: Path):
    applied(cli, tmp_path)
    made = [json.loads(cli("trigger", "demo/ping", "--json").stdout) for _ in range(5)]
    ids = sorted((m["invocation"] for m in made), reverse=True)
    pages, before = [], []
    while True:
        page = json.loads(cli("history", "demo/ping", "--limit", "2", *before, "--json").stdout)
        if not page:
            break
        pages.append([run["id"] for run in page])
        before = ["--before", str(page[-1]["id"])]
    assert [i for page in pages for i in page] == ids and [len(p) for p in pages] == [2, 2, 1]
    rows = list(csv.reader(io.StringIO(cli("history", "demo/ping", "--csv").stdout)))
    assert rows[0] == list(cronchain_cli.HISTORY_CSV)
    assert [int(row[0]) for row in rows[1:]] == ids
    assert cli("history", "--json", "--csv", code=2)  # one format at a time


def test_a_closed_pipe_ends_quietly(cli: Any, tmp_path: Path):
    """``cronchain history --json | head -1``: the reader stops after a line; cronchain
    stops too, with no traceback, as Unix tools do (141)."""
    applied(cli, tmp_path)
    for _ in range(3):
        cli("trigger", "demo/ping")
    env = cli.env  # the fixture's environment
    reader = subprocess.Popen(
        [sys.executable, "-m", "cronchain.scheduler.cli", "history", "--json", "--limit", "3"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # the reader is gone before the first line is written
    assert reader.wait(60) == cronchain_cli.CLOSED_PIPE
    assert reader.stderr.read() == b""


def _options(parser: argparse.ArgumentParser, path: str = "cronchain") -> list[tuple[str, Any]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            found.append((f"{path} {'/'.join(action.option_strings) or action.dest}", action))
    return found


def test_every_option_has_help_with_no_markup():
    options = _options(cronchain_cli._parser())
    assert len(options) > 60
    missing = [name for name, action in options if not action.help]
    assert missing == []
    marked = [name for name, action in options if "`" in action.help or "``" in action.help]
    assert marked == []
    assert "``" not in cronchain_cli._parser().format_help()
