"""Gates with real processes: an HTTP endpoint that says no twice then yes, a celery
task on the user's worker that does the same, and an endpoint that never answers.
PostgreSQL, a private Redis, a control worker (also the user's ``etl`` queue), a work
worker and beat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster
from tests.support.cli import Cli
from tests.support.receivers import GateEndpoint, gate_endpoint
from tests.support.rows import first_slot, slot_rows
from tests.support.wait import every_soon, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def cluster(tasks_cluster: Cluster) -> Cluster:
    return tasks_cluster


@pytest.fixture
def ready() -> Iterator[GateEndpoint]:
    with gate_endpoint(503, 503) as endpoint:  # no twice, then yes
        yield endpoint


@pytest.fixture
def silent() -> Iterator[GateEndpoint]:
    with gate_endpoint(then=0) as endpoint:  # every GET hangs
        yield endpoint


def test_gates_say_no_twice_then_yes_and_a_silent_gate_skips_its_slot(
    cluster: Cluster,
    cli: Cli,
    ready: GateEndpoint,
    silent: GateEndpoint,
    pg_url: str,
    tmp_path: Path,
):
    cli("db", "upgrade")
    cluster.start_worker(queues="cronchain,etl")
    cluster.start_work_worker()
    cluster.start_beat()
    cluster.wait_ready()
    every = every_soon(30, lead=5)  # every 30 s, the first slot 5 s after this
    path = tmp_path / "jobs.yaml"
    path.write_text(
        f"""
project: p
jobs:
  - name: web
    schedule: {every}
    noop: {{}}
    gates: [{{name: cluster, http: "{ready.url}", every: 2s}}]
    max_wait: 1m
  - name: task
    schedule: {every}
    noop: {{}}
    gates:
      - name: capacity
        celery: {{task: sample.ready_on, queue: etl, args: ["{tmp_path}", 3]}}
        every: 2s
    max_wait: 1m
  - name: silent
    schedule: {every}
    noop: {{}}
    gates: [{{http: {{url: "{silent.url}", timeout: 1s}}, every: 2s}}]
    max_wait: 5s
"""
    )
    cli("apply", str(path))
    slot = first_slot(pg_url)

    def done() -> dict[str, dict[str, Any]] | None:
        rows = slot_rows(pg_url, slot)
        ended = all(rows.get(n, {}).get("finished_at") for n in ("web", "task", "silent"))
        return rows if ended else None

    rows = wait_until(done, 90, "the three slots to end")
    web, task, silent_run = rows["web"], rows["task"], rows["silent"]

    # The HTTP gate: three checks two seconds apart, the run started after the third.
    assert web["status"] == "SUCCEEDED"
    [gate] = web["checks"]["gate"]["gates"]
    assert [(a["check"], a["yes"]) for a in gate["answers"]] == [(1, False), (2, False), (3, True)]
    assert "answered 503" in gate["answers"][0]["said"]
    asked = [datetime.fromtimestamp(t, web["started_at"].tzinfo) for t in ready.asked]
    assert len(asked) == 3  # not asked again once it said yes
    assert 1.5 < (asked[1] - asked[0]).total_seconds() < 4
    started_after = (web["started_at"] - asked[2]).total_seconds()
    assert 0 <= started_after < 1.0, f"started {started_after:.3f} s after the yes"

    # The celery gate, on the user's worker: "not yet" twice, then True.
    assert task["status"] == "SUCCEEDED"
    [gate] = task["checks"]["gate"]["gates"]
    assert [a["said"] for a in gate["answers"]] == [
        "returned 'not yet'",
        "returned 'not yet'",
        "returned True",
    ]
    assert len((tmp_path / "gate-calls").read_text().splitlines()) == 3

    # The gate that never answers: on_unmet (skip) once max_wait has passed.
    assert (silent_run["status"], silent_run["reason"]) == ("SKIPPED", "gate")
    assert "no answer within 1s" in silent_run["error"]
    held_for = (silent_run["finished_at"] - silent_run["slot"]).total_seconds()
    assert 5 <= held_for < 12, held_for

    at = slot.isoformat().replace("+00:00", "Z")
    explained = json.loads(cli("explain", "p/web", "--at", at, "--json").stdout)
    assert explained["answer"] == "ran" and "gate cluster said yes at check 3" in explained["text"]
    skipped = json.loads(cli("explain", "p/silent", "--at", at, "--json").stdout)
    assert skipped["answer"] == "skipped" and "no answer within 1s" in skipped["text"]
    assert "gate (waited until" in cli("history", "p/web").stdout
    history = json.loads(cli("history", "p/silent", "--json", "--limit", "50").stdout)
    assert [r["status"] for r in history if r["slot"] == at] == ["SKIPPED"]
