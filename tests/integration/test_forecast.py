"""``cronchain forecast`` against ``cronchain next``, job by job: herds placed on purpose
(an hourly herd, one in Paris at its wall time, fixed rates on the half hour), jobs
spread over the minute, and jobs that must not count (paused, triggered), all applied
from a file as a user does; every job's slots, asked of ``cronchain next`` (once for
jobs alike), must add up to the forecast's fires, herds and busiest second. And the
same forecast as a page."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec
from tests.support.cli import process_cli
from tests.support.engine import Clock
from tests.support.jobs import write_job_file
from tests.support.web import client


def jobs(count: int, name: str, schedule: str, **more: object) -> list[dict[str, object]]:
    return [{"name": f"{name}{i:03d}", "schedule": schedule, "noop": {}, **more}
            for i in range(count)]  # fmt: skip


@pytest.mark.postgres
def test_the_forecast_is_every_jobs_next_slots_added_up(pg_url: str, tmp_path: Path):
    spread = [
        {"name": f"spread{s:02d}", "schedule": f"*/15 * * * * {s}", "noop": {}}
        for s in range(0, 60, 5)
    ]
    write_job_file(tmp_path / "herds.yaml", "herds", [
        *jobs(120, "hourly", "0 * * * *"),
        *jobs(70, "paris", "30 2 * * *", timezone="Europe/Paris", days="both"),
        *jobs(40, "half", "every 30m"),
        *jobs(3, "pinged", "triggered"),
        *spread,
    ])  # fmt: skip
    write_job_file(tmp_path / "quiet.yaml", "quiet", jobs(40, "also_hourly", "0 * * * *"))
    with process_cli(pg_url, tmp_path) as cli:
        cli("apply", "herds.yaml")
        cli("apply", "quiet.yaml")
        cli("pause", "herds/hourly000")
        # A fixed day: the real clock's would cross Paris's DST change twice a year.
        day = ("--from", "2026-12-01T00:00:00Z")
        found = json.loads(cli("forecast", *day, "--window", "24h", "--json").stdout)
        said = cli("forecast", *day).stdout  # as a person reads it: a herd that comes again once
        assert "herds of 100 fires or more in one second: 25\n" in said, said
        assert re.search(
            r"^200 fires \(herds 160, quiet 40: .*\) at \S+ and 23 more, every 1h$", said, re.M
        )
        assert re.search(r"^111 fires \(herds 111: .*\) at \S+$", said, re.M), said
        start, end = (datetime.fromisoformat(found[k]) for k in ("start", "end"))
        assert (start, end - start) == (datetime(2026, 12, 1, tzinfo=UTC), timedelta(hours=24))

        # Each job's slots, as `next` gives them for its schedule, zone and days: asked
        # once for the jobs that share all three (a fork of the CLI costs 0.1 s).
        alike = Counter(
            (job["schedule"], job["timezone"], job["days"])
            for job in json.loads(cli("jobs", "--json").stdout)
            if not job["paused"] and job["schedule"] != "triggered"
        )
        expected: Counter[datetime] = Counter()
        after = start.isoformat()
        for (schedule, zone, days), count in alike.items():
            args = ["--tz", zone, "--days", days, "--after", after, "--count", "200"]
            slots = json.loads(cli("next", schedule, *args, "--json").stdout)
            fires = [datetime.fromisoformat(s["utc"]) for s in slots]
            assert fires[-1] > end  # the 200 reach past the window
            for t in fires:
                if t <= end:
                    expected[t.replace(microsecond=0)] += count

    assert found["jobs"] == 120 - 1 + 70 + 40 + 12 + 40
    assert found["fires"] == sum(expected.values())
    assert sum(cell["fires"] for cell in found["cells"]) == found["fires"]
    herds = sorted((t, n) for t, n in expected.items() if n >= found["threshold"])
    assert [(datetime.fromisoformat(h["at"]), h["fires"]) for h in found["herds"]] == herds
    # Placed on purpose: each hour's 119 + 40 beside the half-hourly 40, and Paris's 70
    # with the half-hourly 40 at 02:30 there; of the spread jobs, only the one at second
    # 0 of each quarter hour is among them.
    assert Counter(n for _, n in herds) == {119 + 40 + 40 + 1: 24, 70 + 40 + 1: 1}
    busiest = max(expected.values())
    assert found["peak"]["fires"] == busiest == 200
    on_the_hour = next(h for h in found["herds"] if h["fires"] == 200)
    assert on_the_hour["projects"] == {"herds": 160, "quiet": 40}
    assert any("6th field" in line for line in on_the_hour["advice"])
    assert any('"every 30m offset Ns"' in line for line in on_the_hour["advice"])


@pytest.mark.postgres
def test_forecast_refuses_a_window_it_cannot_walk(pg_url: str, tmp_path: Path):
    with process_cli(pg_url, tmp_path) as cli:
        for window in ("0s", "8d", "soon"):
            done = cli("forecast", "--window", window, code=2)
            assert "--window" in done.stderr, done.stderr


def test_the_forecast_page_draws_the_day_and_lists_its_herds(engine: Engine, clock: Clock):
    hourly = [JobSpec("p", f"h{i:03d}", "0 * * * *", kind="noop") for i in range(120)]
    Scheduler(engine).apply(hourly, project="p")
    c = client(engine, clock)
    text = c.get("/forecast").text
    assert "<h1>The next 24h</h1>" in text and "<h2>Herds: 24</h2>" in text
    assert len(re.findall(r'<rect class="h4"', text)) == 24  # each hour's cell, a herd's
    assert '<a href="/jobs/p/h000">p/h000</a>' in text and "6th field" in text
    assert "<h2>Herds: 0</h2>" in c.get("/forecast?threshold=121").text
    assert "<h2>Herds: 1</h2>" in c.get("/forecast?window=90m").text  # 13:00; not 12:00
    for bad in ("window=8d", "window=soon", "window=0s", "threshold=0", "threshold=x"):
        assert c.get(f"/forecast?{bad}").status_code == 400, bad
