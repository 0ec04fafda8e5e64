"""A run's own page and the charts of a job's last runs, read as a person reads them:
each attempt with its worker, its error and what it took, what the run waited for,
and bars whose titles carry the figures."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import sqlalchemy
from markupsafe import escape
from sqlalchemy import update

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import SUCCEEDED, Outcome
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.models import invocations
from tests.support.deliver import deliver, deliver_runs, deliver_ticks_and_starts
from tests.support.engine import Clock, RecordingPort, Scripted, engine_with
from tests.support.web import client

CELERY = {"task": "etl.run", "queue": "etl"}


def page(engine: Engine, clock: Clock, path: str, status: int = 200) -> str:
    answer = client(engine, clock).get(path)
    assert answer.status_code == status, answer.text
    return answer.text


def cells(text: str, section: str) -> list[list[str]]:
    """The rows of ``section``'s table, each a list of its cells' text, tags removed."""
    found = re.search(rf'<section class="{section}">.*?</section>', text, re.S)
    assert found is not None, text
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(0), re.S)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)
        ]
        for r in rows
        if "<td" in r
    ]


def test_a_runs_page_shows_each_attempt_with_its_worker_error_and_duration(
    engine: Engine, port: RecordingPort, clock: Clock
):
    scheduler = Scheduler(engine)
    retried = {"max_attempts": 2, "backoff": 30, "jitter": 0}
    job = JobSpec(
        "p", "etl", "triggered", "Europe/Paris", "celery", CELERY, controls={"retries": retried}
    )
    scheduler.apply([job], project="p")
    run = scheduler.trigger("p/etl")["invocation"]
    deliver(engine, port)
    assert engine.attempts.claim(run, 1, "celery@first") is not None
    clock.advance(2.5)
    failed = Outcome.failed("KeyError: 'x' <b>not markup</b> https://api/x?token=secret")
    assert engine.runs.finish_invocation(run, failed, attempt=1)

    waiting = page(engine, clock, f"/jobs/p/etl/runs/{run}")
    [first] = cells(waiting, "attempts")
    assert first[:2] == ["1", "celery@first"] and first[4] == "2.5 s"
    assert "FAILED" in first[5]
    assert "&lt;b&gt;not markup&lt;/b&gt;" in waiting and "token=secret" not in waiting
    assert "https://api/x?(query hidden)" in waiting
    assert re.search(r"<th>next attempt</th><td><time [^>]*>in 30 s</time>", waiting)
    # Its job's slots and history say what comes next before the error it came from.
    listed = page(engine, clock, "/jobs/p/etl")
    assert listed.count("triggered: retrying in 30 s (2/2): KeyError: &#39;x&#39;") == 2

    clock.advance(30)
    deliver(engine, port, clock)
    assert engine.attempts.claim(run, 2, "celery@second") is not None
    clock.advance(61)
    assert engine.runs.finish_invocation(run, SUCCEEDED, attempt=2)

    done = page(engine, clock, f"/jobs/p/etl/runs/{run}")
    rows = cells(done, "attempts")
    assert [r[:2] for r in rows] == [["1", "celery@first"], ["2", "celery@second"]]
    assert [r[4] for r in rows] == ["2.5 s", "1 min 01 s"]
    assert "SUCCEEDED" in rows[1][5] and "next attempt" not in done
    assert '<a href="/jobs/p/etl">p/etl</a> / run' in done  # the way back

    # Its start lag counts from its first attempt's start (a claim at once), not its last.
    job_page = page(engine, clock, "/jobs/p/etl")
    lag = re.search(r'<svg class="chart chart-lag".*?</svg>', job_page, re.S)
    assert lag is not None and re.search(rf"<title>run {run}, [^<]*: 0 ms, SUCCEEDED", lag[0])

    # The job's history links to it, and a run of another job is not found under it.
    assert f'<a href="/jobs/p/etl/runs/{run}">{run}</a>' in page(engine, clock, "/jobs/p/etl")
    scheduler.apply([job, JobSpec("p", "other", "triggered", kind="noop")], project="p")
    page(engine, clock, f"/jobs/p/other/runs/{run}", 404)
    page(engine, clock, "/jobs/p/etl/runs/999999999", 404)
    page(engine, clock, "/jobs/p/etl/runs/0", 404)


def test_a_runs_page_says_what_it_waited_for_and_what_explain_says(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """A run of a slot that waited for its pool: how long, and explain's answer for its
    slot, the one ``cronchain explain`` gives."""
    scheduler = Scheduler(engine)
    scheduler.set_pool("one", 1)
    pooled = JobSpec("p", "pooled", "every 10s", kind="noop", controls={"pool": "one"})
    holder = JobSpec("p", "holder", "triggered", kind="noop", controls={"pool": "one"})
    scheduler.apply([pooled, holder], project="p")
    scheduler.trigger("p/holder")  # takes the pool's one place and keeps it, undelivered
    deliver_ticks_and_starts(engine, port)
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    [slotted] = [r for r in scheduler.history("p/pooled") if r["slot"]][:1]
    text = page(engine, clock, f"/jobs/p/pooled/runs/{slotted['id']}")
    assert "<h3>a place in pool one</h3>" in text and "still waiting" in text
    assert "no attempt yet: the run waits" in text
    explained = scheduler.explain("p/pooled", datetime.fromisoformat(slotted["slot"]))
    assert f"<strong>{explained['answer']}</strong>: {escape(explained['text'])}" in text

    deliver_runs(engine, port)  # the holder ends; its place goes to the waiting run
    clock.advance(4)
    deliver(engine, port, clock)
    text = page(engine, clock, f"/jobs/p/pooled/runs/{slotted['id']}")
    assert re.search(
        r"<h3>a place in pool one</h3>\s*<p>since <time [^>]*>[^<]+</time>: released", text
    )


def test_the_charts_draw_each_runs_duration_and_start_lag_with_its_figures(
    engine: Engine, port: RecordingPort, clock: Clock
):
    scheduler = Scheduler(engine)
    scheduler.apply([JobSpec("p", "t", "triggered", kind="noop")], project="p")
    for _ in range(3):
        scheduler.trigger("p/t")
        deliver_ticks_and_starts(engine, port)
        deliver_runs(engine, port)
    runs = sorted(r["id"] for r in scheduler.history("p/t"))
    with engine.db.begin() as conn:  # what each took and how late it started, set
        for run, took, lag in zip(runs, (2.0, 4.0, 0.5), (0.1, 0.3, 0.2), strict=True):
            made = (
                conn.execute(invocations.select().where(invocations.c.id == run)).one().created_at
            )
            started = made + timedelta(seconds=lag)
            conn.execute(
                update(invocations)
                .where(invocations.c.id == run)
                .values(started_at=started, finished_at=started + timedelta(seconds=took))
            )
    text = page(engine, clock, "/jobs/p/t")
    took_chart = re.search(r'<svg class="chart chart-took".*?</svg>', text, re.S)
    lag_chart = re.search(r'<svg class="chart chart-lag".*?</svg>', text, re.S)
    assert took_chart is not None and lag_chart is not None
    titles = re.findall(
        r"<title>run (\d+), [^:]+:\d\d:\d\d [^:]+: ([^,]+), (\w+)</title>", took_chart.group(0)
    )
    assert [(int(r), t) for r, t, _ in titles] == list(
        zip(runs, ["2.0 s", "4.0 s", "500 ms"], strict=True)
    )
    heights = [float(h) for h in re.findall(r'height="([\d.]+)"/></a>', took_chart.group(0))]
    assert heights[1] > heights[0] > heights[2]  # oldest on the left, drawn to scale
    assert "median 2.0 s, largest 4.0 s" in text
    lags = re.findall(r"<title>run \d+, [^:]+:\d\d:\d\d [^:]+: ([^,]+),", lag_chart.group(0))
    assert lags == ["100 ms", "300 ms", "200 ms"]
    for run in runs:
        assert f'<a href="/jobs/p/t/runs/{run}" tabindex="-1">' in took_chart.group(0)


def test_a_job_without_runs_draws_no_chart(engine: Engine, clock: Clock):
    Scheduler(engine).apply([JobSpec("p", "t", "triggered", kind="noop")], project="p")
    text = page(engine, clock, "/jobs/p/t")
    assert "<svg" not in text and "no runs yet" in text


def test_what_explain_quotes_on_a_runs_page_hides_query_strings(
    db: sqlalchemy.Engine, clock: Clock
):
    """explain quotes a failed run's error, which may hold a URL with a token."""
    failed = Outcome.failed("POST https://api.example.com/hook?token=TOPSECRET: 500")
    engine, port = engine_with(db, clock, Scripted(failed))
    Scheduler(engine).apply([JobSpec("p", "t", "every 10s", kind="noop")], project="p")
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    deliver_runs(engine, port)
    [run] = Scheduler(engine).history("p/t")
    assert run["status"] == "FAILED" and run["slot"]
    text = page(engine, clock, f"/jobs/p/t/runs/{run['id']}")
    assert '<section class="explain">' in text and "TOPSECRET" not in text
    assert "https://api.example.com/hook?(query hidden)" in text
    at = run["slot"].replace("+00:00", "Z")
    assert "TOPSECRET" not in page(engine, clock, f"/jobs/p/t?at={at}")
