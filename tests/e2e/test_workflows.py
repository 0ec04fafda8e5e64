"""Workflows with real processes: A, B, C -> D on a shared schedule, B an HTTP job whose
endpoint fails on cue. PostgreSQL, a private Redis, celery worker, work worker, beat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster
from tests.support.cli import Cli
from tests.support.receivers import Webhook, webhook
from tests.support.rows import first_slot, slot_rows
from tests.support.wait import every_soon, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def endpoint() -> Iterator[Webhook]:
    with webhook() as hook:
        yield hook


def write_jobs(path: Path, url: str, downstreams: str) -> Path:
    """Every job every 20 s, the first slot 5 s after this (see ``every_soon``)."""
    every = every_soon(20, lead=5)
    path.write_text(
        f"""
project: p
jobs:
  - {{name: a, schedule: {every}, noop: {{}}}}
  - {{name: c, schedule: {every}, noop: {{}}}}
  - name: b
    schedule: {every}
    http: {{url: "{url}", method: POST, body: "{{}}"}}
    retries: {{max_attempts: 3, backoff: 3s, max_backoff: 3s, jitter: 0}}
{downstreams.replace("schedule: every 20s", f"schedule: {every}")}
"""
    )
    return path


def needs(name: str, **more: str) -> str:
    extra = "".join(f"\n    {key}: {value}" for key, value in more.items())
    return f"""  - name: {name}
    schedule: every 20s
    noop: {{}}
    requires:
      - {{job: a, succeeded_within: 1h}}
      - {{job: b, succeeded_within: 1h}}
      - {{job: c, succeeded_within: 1h}}{extra}
"""


def start(cluster: Cluster, cli: Cli, path: Path, url: str, downstreams: str) -> None:
    cli("db", "upgrade")
    cluster.start_worker()
    cluster.start_work_worker()
    cluster.start_beat()
    cluster.wait_ready()
    cli("apply", str(write_jobs(path, url, downstreams)))


def test_d_waits_for_b_s_retry_and_starts_within_a_second_of_its_success(
    cluster: Cluster, cli: Cli, endpoint: Webhook, pg_url: str, tmp_path: Path
):
    endpoint.answers = [500]  # B's first attempt fails, its retry 3 s later succeeds
    start(cluster, cli, tmp_path / "jobs.yaml", endpoint.url, needs("d", max_wait="2m"))
    slot = first_slot(pg_url)
    held = wait_until(
        lambda: (d := slot_rows(pg_url, slot).get("d")) and d["status"] == "WAITING" and d,
        30,
        "D waiting for B",
    )
    assert held["reason"] == "upstream"

    def done() -> dict[str, dict[str, Any]] | None:
        rows = slot_rows(pg_url, slot)
        final = all(rows.get(n, {}).get("status") == "SUCCEEDED" for n in "abcd")
        return rows if final else None

    rows = wait_until(done, 60, "A, B, C and D to succeed")
    b, d = rows["b"], rows["d"]
    assert b["attempt"] == 2 and d["attempt"] == 1
    assert d["checks"]["released_at"] is not None
    waited = (d["started_at"] - b["finished_at"]).total_seconds()
    assert 0 <= waited < 1.0, f"D started {waited:.3f} s after B's success"

    history = json.loads(cli("history", "p/d", "--json", "--limit", "50").stdout)
    [run] = [r for r in history if r["id"] == d["id"]]
    assert run["checks"]["held_at"] and run["checks"]["released_at"]
    table = cli("history", "p/d").stdout
    assert "upstream (waited until" in table
    at = slot.isoformat().replace("+00:00", "Z")
    explained = json.loads(cli("explain", "p/d", "--at", at, "--json").stdout)
    assert explained["answer"] == "ran"
    assert "waited for its upstreams" in explained["text"] and "p/b succeeded" in explained["text"]


def test_b_failing_past_max_wait_skips_or_fails_d_once(
    cluster: Cluster, cli: Cli, endpoint: Webhook, pg_url: str, tmp_path: Path
):
    endpoint.answers = [500] * 1000  # B never succeeds
    downstreams = needs("d", max_wait="8s") + needs("f", max_wait="8s", on_unmet="fail")
    start(cluster, cli, tmp_path / "jobs.yaml", endpoint.url, downstreams)
    slot = first_slot(pg_url)

    def settled() -> dict[str, dict[str, Any]] | None:
        rows = slot_rows(pg_url, slot)
        ended = all(rows.get(n, {}).get("finished_at") for n in "df")
        return rows if ended else None

    rows = wait_until(settled, 60, "D and F to give up on B")
    d, f = rows["d"], rows["f"]
    assert (d["status"], d["reason"], d["attempt"]) == ("SKIPPED", "upstream", 0)
    assert (f["status"], f["reason"], f["attempt"]) == ("FAILED", "upstream", 0)
    assert "p/b has no success" in d["error"] and "p/b has no success" in f["error"]
    held_for = (d["finished_at"] - d["created_at"]).total_seconds()
    assert held_for >= 8, held_for
    at = slot.isoformat().replace("+00:00", "Z")
    explained = json.loads(cli("explain", "p/d", "--at", at, "--json").stdout)
    assert explained["answer"] == "skipped" and "p/b has no success" in explained["text"]
    # Once: the slot has one row each, and no run of it was ever sent.
    history = json.loads(cli("history", "p/f", "--json", "--limit", "50").stdout)
    assert [r["status"] for r in history if r["slot"] == at] == ["FAILED"]
