"""``cronchain up``'s log, as ``make run`` shows it (issue 35): one line per run outcome
(job, slot, attempt, duration) from the path that said it, failures at WARNING, none of
Celery's per-task lines, banners or broker warnings; or, with
``CRONCHAIN_LOG_FORMAT=json``, one JSON object per line with the outcome's fields."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

JOBS = """
project: logs
jobs:
  - {name: ok, schedule: every 2s, noop: {}}
  - {name: bad, schedule: every 2s, noop: {fail: true}}
"""


def run_up(tmp_path: Path, **env: str) -> list[str]:
    (tmp_path / "jobs.yaml").write_text(JOBS)
    cluster = Cluster.create(tmp_path, **env)
    cluster.start("up", sys.executable, "-m", "cronchain.scheduler.cli", "up", "jobs.yaml")
    try:
        wait_until(lambda: cluster.log("up").count("logs/ok") >= 3, 60, "three runs of ok")
    finally:
        cluster.kill("up", signal.SIGINT)
    return cluster.log("up").splitlines()


def test_each_outcome_is_one_line_and_celery_s_chatter_is_gone(tmp_path: Path):
    lines = run_up(tmp_path)
    ok = [line for line in lines if "logs/ok " in line]
    bad = [line for line in lines if "logs/bad " in line]
    assert ok and bad
    pattern = r"INFO/MainProcess\] work: logs/ok \S+Z attempt 1 SUCCEEDED in \d+\.\d{3} s$"
    assert all(re.search(pattern, line) for line in ok), ok
    assert all(
        "WARNING" in line and "FAILED" in line and "(noop: fail is set)" in line for line in bad
    )
    text = "\n".join(lines)
    for chatter in ("Task cronchain.", "No hostname was supplied", "-------------- ", "[tasks]"):
        assert chatter not in text, chatter
    assert "does not consume cronchain.work" not in text  # up starts the work path too
    assert "control: control@" in text and "work: work@" in text  # each line names its path


def test_json_lines_carry_the_outcome_s_fields(tmp_path: Path):
    lines = run_up(tmp_path, CRONCHAIN_LOG_FORMAT="json")
    records = [json.loads(line) for line in lines if line.startswith("{")]
    outcomes = [r for r in records if r.get("job") == "logs/ok"]
    assert outcomes, lines
    first = outcomes[0]
    assert (first["path"], first["status"], first["attempt"], first["level"]) == (
        "work",
        "SUCCEEDED",
        1,
        "INFO",
    )
    assert first["slot"].endswith("Z") and first["duration"] >= 0
    failed = [r for r in records if r.get("job") == "logs/bad"]
    assert failed and all(r["level"] == "WARNING" and r["error"] for r in failed)
