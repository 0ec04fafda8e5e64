"""The web page on real databases (SQLite and PostgreSQL) through Flask's test client,
with a fixed clock: what the jobs page and a job's page show after real steps of the
engine, that nothing secret is shown, that without credentials the page is read-only,
that an operator's controls change the job as the CLI's do, and that the CSRF checks
refuse a forged POST. On PostgreSQL, at 10,000 jobs, that the strips are one query
that reads the index (job_id, id)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import pages
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import invocations
from cronchain.scheduler.web import csrf
from tests.support.deliver import deliver_runs, deliver_ticks_and_starts
from tests.support.engine import Clock, RecordingPort
from tests.support.web import AUTH, CREDENTIALS, SAME_SITE, client

pytestmark = pytest.mark.postgres


def page(c: FlaskClient, path: str, headers: dict[str, str] | None = None) -> str:
    answer = c.get(path, headers=headers or {})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_data(as_text=True)


def history_of(engine: Engine, ref: str) -> list[dict[str, Any]]:
    return Scheduler(engine).history(ref)


@pytest.fixture
def busy(engine: Engine, port: RecordingPort, clock: Clock) -> Engine:
    """Jobs of project ``p`` with a history: ``ok`` succeeded, then skipped a slot
    (overlap) while its run was held, ``bad`` failed, ``paris`` runs in Europe/Paris
    (the clock is 2026-03-01, its zone's clocks go forward on 2026-03-29), ``down`` is
    triggered by ``ok``; ``h`` is an http job whose URL and header hold secrets."""
    Scheduler(engine).apply(
        [
            JobSpec("p", "ok", "every 10s", kind="noop", controls={"triggers": ["down"]}),
            JobSpec("p", "bad", "every 10s", kind="noop", options={"fail": True}),
            JobSpec("p", "paris", "30 2 * * *", timezone="Europe/Paris", kind="noop"),
            JobSpec("p", "down", "triggered", kind="noop"),
            JobSpec(
                "p",
                "h",
                "triggered",
                kind="http",
                options={
                    "url": "https://hooks.example.com/run?token=TOPSECRET1",
                    "headers": {"Authorization": "Bearer TOPSECRET2"},
                },
            ),
        ],
        project="p",
    )
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    held = [c for c in port.runs if c.job.endswith("/ok")]
    port.runs[:] = [c for c in port.runs if c not in held]
    deliver_runs(engine, port)  # bad fails
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)  # ok's second slot: SKIPPED (overlap), its run is held
    port.runs[:] = [*held, *[c for c in port.runs if c.job.endswith("/bad")]]
    deliver_runs(engine, port)  # ok succeeds (and triggers down), bad fails again
    return engine


def test_jobs_page_lists_states_next_ticks_and_strips(busy: Engine, clock: Clock):
    text = page(client(busy, clock), "/")
    for ref in ("p/ok", "p/bad", "p/paris", "p/down", "p/h"):
        assert f'href="/jobs/{ref}"' in text
    assert "all (5)" in text and "p (5)" in text
    # paris's next tick in its own zone: 02:30 CET on 2 March.
    assert "2026-03-02 02:30:00 CET" in text
    cells = re.findall(r'<span class="cell s-(\w+)" title="([^"]*)"', text)
    titles = [title for status, title in cells if status == "SKIPPED"]
    assert titles == ["slot 2026-03-01 12:00:20 UTC: SKIPPED (overlap)"]
    assert sum(status == "FAILED" for status, _ in cells) == 2
    assert any(t.startswith("triggered ") for _, t in cells)  # down, triggered by ok

    # One project's jobs (tests/integration/test_web_list.py filters and pages them).
    assert "p/ok" in page(client(busy, clock), "/?project=p")
    assert "no jobs in project q" in page(client(busy, clock), "/?project=q")


def test_dst_is_marked_when_the_clocks_change_before_the_next_tick(busy: Engine, clock: Clock):
    clock.now = datetime(2026, 3, 28, 12, tzinfo=UTC)
    with busy.db.begin() as conn:  # paris's pending tick: the slot after the change
        conn.exec_driver_sql(
            "UPDATE jobs SET tick_at = '2026-03-29 00:30:00' WHERE name = 'paris'"
            if busy.db.dialect.name == "sqlite"
            else "UPDATE jobs SET tick_at = '2026-03-29 00:30:00+00' WHERE name = 'paris'"
        )
    text = page(client(busy, clock), "/")
    assert "2026-03-29 01:30:00 CET" in text
    note = "DST: clocks go forward 1 h on 2026-03-29: 02:00 CET becomes 03:00 CEST"
    assert f'<span class="dst" title="{note}, after this tick">' in text
    job = page(client(busy, clock), "/jobs/p/paris")
    assert note in job  # a row of the timeline, among the next slots


def test_job_page_shows_timeline_links_history_and_explain(busy: Engine, clock: Clock):
    c = client(busy, clock)
    text = page(c, "/jobs/p/ok")
    assert "<strong>overlap</strong>: another run was active" in text  # skip reason
    assert 'triggers <a href="/jobs/p/down">p/down</a>' in text
    assert "2026-03-01 12:00:30 UTC" in text  # the next slot, then the ones after
    down = page(c, "/jobs/p/down")
    assert 'triggered by <a href="/jobs/p/ok">p/ok</a>' in down

    # explain: the same answer as cronchain explain (the API the CLI calls).
    at = "2026-03-01T12:00:20Z"
    expected = Scheduler(busy).explain("p/ok", datetime(2026, 3, 1, 12, 0, 20, tzinfo=UTC))
    answer = page(c, f"/jobs/p/ok?at={at}")
    assert f"<strong>skipped</strong>: {expected['text']}" in answer
    assert "has no time zone" in page(c, "/jobs/p/ok?at=2026-03-01T12:00:20")
    assert "is not an ISO 8601 time" in page(c, "/jobs/p/ok?at=yesterday")

    assert c.get("/jobs/p/nope").status_code == 404
    assert c.get("/jobs/q/ok").status_code == 404


def test_history_is_paged(engine: Engine, port: RecordingPort, clock: Clock):
    Scheduler(engine).apply([JobSpec("p", "t", "triggered", kind="noop")], project="p")
    for _ in range(55):
        Scheduler(engine).trigger("p/t")
    c = client(engine, clock)
    first = page(c, "/jobs/p/t")
    older = re.search(r'href="(/jobs/p/t\?before=\d+)"', first)
    assert older is not None
    second = page(c, older.group(1).replace("&amp;", "&"))
    ids = re.findall(r"<tr><td><a href=\"/jobs/p/t/runs/(\d+)\">", first + second)
    assert len(ids) == len(set(ids)) == 55
    assert "older runs" not in second


def test_nothing_secret_is_shown(busy: Engine, clock: Clock):
    with busy.db.begin() as conn:  # an error that quotes a URL with its query string
        conn.exec_driver_sql(
            "UPDATE invocations SET error = 'http: GET https://hooks.example.com/run"
            "?token=TOPSECRET3 answered 500' WHERE status = 'FAILED'"
        )
    for path in ("/", "/jobs/p/h", "/jobs/p/bad"):
        text = page(client(busy, clock, CREDENTIALS), path, AUTH)
        assert "TOPSECRET" not in text and "s3cret" not in text, path
    text = page(client(busy, clock), "/jobs/p/h")
    assert "https://hooks.example.com/run (query hidden)" in text
    assert "Authorization (values hidden)" in text
    assert "https://hooks.example.com/run?(query hidden) answered 500" in page(
        client(busy, clock), "/jobs/p/bad"
    )


def test_without_credentials_the_page_is_read_only(busy: Engine, clock: Clock):
    c = client(busy, clock)
    text = page(c, "/jobs/p/ok")
    assert '<form method="post"' not in text and csrf.FIELD not in text
    assert "read-only" in text
    for action in ("pause", "resume", "trigger", "abort"):
        answer = c.post(f"/jobs/p/ok/{action}", data={}, headers=SAME_SITE)
        assert answer.status_code == 403, action
    job = next(j for j in Scheduler(busy).jobs() if j["id"] == "p/ok")
    assert not job["paused"]


def test_an_operator_pauses_resumes_triggers_and_aborts(busy: Engine, clock: Clock):
    c = client(busy, clock, CREDENTIALS)
    assert c.get("/jobs/p/ok").status_code == 401
    text = page(c, "/jobs/p/ok", AUTH)
    token = re.search(rf'name="{csrf.FIELD}" value="(\w+)"', text)
    assert token is not None and token.group(1) == csrf.token(CREDENTIALS)
    form = {csrf.FIELD: token.group(1)}

    def post(action: str, **fields: str) -> Any:
        return c.post(f"/jobs/p/ok/{action}", data=form | fields, headers=AUTH | SAME_SITE)

    answer = post("pause", reason="maintenance <b>")
    assert answer.status_code == 303 and answer.location.endswith("/jobs/p/ok?done=paused")
    job = next(j for j in Scheduler(busy).jobs() if j["id"] == "p/ok")
    assert job["paused"] and job["state"] == "SUSPENDED"
    assert job["pause_reason"] == "maintenance <b>"
    shown = page(c, "/jobs/p/ok?done=paused", AUTH)
    assert "maintenance &lt;b&gt;" in shown and 'role="status">paused<' in shown
    assert 'value="resume"' in shown  # a paused job is offered resume, not pause

    assert post("resume").status_code == 303
    job = next(j for j in Scheduler(busy).jobs() if j["id"] == "p/ok")
    assert not job["paused"] and job["state"] == "SCHEDULED"

    answer = post("trigger")
    assert answer.status_code == 303 and "done=started" in answer.location
    made = history_of(busy, "p/ok")[0]
    assert made["trigger_id"] and made["status"] in ("STARTING", "RUNNING")
    answer = post("abort")
    assert answer.status_code == 303 and "done=aborted&n=1" in answer.location
    assert history_of(busy, "p/ok")[0]["status"] == "ABORTED"
    assert c.post("/jobs/p/nope/pause", data=form, headers=AUTH | SAME_SITE).status_code == 404


def test_forged_posts_are_refused(busy: Engine, clock: Clock):
    c = client(busy, clock, CREDENTIALS)
    good = {csrf.FIELD: csrf.token(CREDENTIALS)}
    cases = [
        ({csrf.FIELD: csrf.token("admin:other")}, SAME_SITE),  # a wrong token
        ({}, SAME_SITE),  # no token
        (good, {"Origin": "https://evil.example"}),  # another site
        (good, {"Origin": "null"}),  # an opaque origin (a sandboxed frame)
        (good, {"Referer": "https://evil.example/page"}),
        (good, {}),  # neither Origin nor Referer
    ]
    for data, headers in cases:
        answer = c.post("/jobs/p/ok/pause", data=data, headers=AUTH | headers)
        assert answer.status_code == 403, (data, headers)
    assert not next(j for j in Scheduler(busy).jobs() if j["id"] == "p/ok")["paused"]
    referer = {"Referer": "http://localhost/jobs/p/ok"}  # no Origin: the Referer counts
    assert c.post("/jobs/p/ok/pause", data=good, headers=AUTH | referer).status_code == 303


def test_strips_are_one_query_on_the_index(pg_url: str):
    """10,000 jobs with 40 runs each on PostgreSQL: a page's strips are one statement
    whose plan reads (job_id, id) on each partition, never a whole table."""
    db = make_engine(pg_url)
    with db.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision, enabled,"
            " paused, state, generation, invocation_running, overruns, active, buffered,"
            " created_at, updated_at) SELECT 'p' || mod(g, 10), 'j' || g, 'noop', 'every 10s',"
            " 'UTC', '{}', 'r', true, false, 'SCHEDULED', 0, false, 0, 0, 0, now(), now()"
            " FROM generate_series(1, 10000) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO invocations (job_id, slot, revision, status, attempt, created_at,"
            " started_at, finished_at, backfill, filed_at) SELECT j.id, now() - s * interval"
            " '1 hour', 'r', 'SUCCEEDED', 1, now(), now(), now(), false, now() - s * interval"
            " '1 hour' FROM jobs j, generate_series(1, 40) s"
        )
        conn.exec_driver_sql("ANALYZE")
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    with db.connect() as conn:
        listed, _ = pages.listing(conn, pages.JobQuery(project="p3"), offset=0, limit=200)
        sqlalchemy.event.listen(conn, "before_cursor_execute", record)
        found = pages.strips(conn, [job.id for job in listed])
        sqlalchemy.event.remove(conn, "before_cursor_execute", record)
        assert len(seen) == 1
        assert len(found) == 200 and all(len(runs) == pages.STRIP for runs in found.values())
        newest = found[listed[0].id]
        assert [r.id for r in newest] == sorted(r.id for r in newest)
        statement, parameters = seen[0]
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters))
        assert not re.findall(r"Seq Scan on invocations", plan), plan
        assert "ix_invocations" in plan or "invocations_p" in plan, plan
    db.dispose()


def test_strips_on_sqlite_read_the_newest_runs(tmp_path: Path):
    """SQLite's form of the same query (no LATERAL) returns the same cells."""
    from cronchain.migrations import upgrade

    db = make_engine(f"sqlite:///{tmp_path}/c.db")
    upgrade(db)
    with db.begin() as conn:
        for j in range(3):
            conn.exec_driver_sql(
                "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision,"
                " enabled, paused, state, generation, invocation_running, overruns, active,"
                f" buffered, created_at, updated_at) VALUES ('p', 'j{j}', 'noop', 'triggered',"
                " 'UTC', '{}', 'r', 1, 0, 'SCHEDULED', 0, 0, 0, 0, 0, '2026-03-01 00:00:00',"
                " '2026-03-01 00:00:00')"
            )
        for n in range(40 * 3):
            conn.exec_driver_sql(
                "INSERT INTO invocations (job_id, trigger_id, revision, status, attempt,"
                " created_at, started_at, finished_at, backfill, filed_at) VALUES"
                f" ({n % 3 + 1}, 't{n}', 'r', 'SUCCEEDED', 1, '2026-03-01 00:00:00',"
                " '2026-03-01 00:00:00', '2026-03-01 00:00:00', 0, '2026-03-01 00:00:00')"
            )
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    with db.connect() as conn:
        sqlalchemy.event.listen(conn, "before_cursor_execute", record)
        found = pages.strips(conn, [1, 2, 3, 4])
        sqlalchemy.event.remove(conn, "before_cursor_execute", record)
        seen = [(q, p) for q, p in seen if q != "BEGIN"]  # make_engine's SQLite transaction
        assert len(seen) == 1
        plan = [r[3] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {seen[0][0]}", seen[0][1])]
        assert all(step.startswith(("SEARCH", "CORRELATED")) for step in plan), plan
        assert any("ix_invocations_job_id_id (job_id=? AND id>?)" in step for step in plan), plan
    assert [len(found[j]) for j in (1, 2, 3, 4)] == [30, 30, 30, 0]
    assert [r.trigger_id for r in found[1]][-1] == "t117"  # the newest, last
    db.dispose()


def test_job_page_lists_its_alerts(
    engine: Engine, port: RecordingPort, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CRONCHAIN_CHANNELS", '{"hook": {"webhook": {"env": "NO_SUCH_URL"}}}')
    alerts = {"on": ["failed"], "to": ["hook"]}
    spec = JobSpec(
        "p", "bad", "every 10s", kind="noop", options={"fail": True}, controls={"alerts": alerts}
    )
    Scheduler(engine).apply([spec], project="p")
    c = client(engine, clock)
    assert "<h2>Alerts</h2>" not in page(c, "/jobs/p/bad")  # none yet: no section
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    deliver_runs(engine, port)
    text = page(c, "/jobs/p/bad")
    assert "<h2>Alerts</h2>" in text
    assert re.search(
        r"<td[^>]*>failed</td><td[^>]*>pending</td><td[^>]*>hook not yet</td>", text
    ), text


def test_a_triggered_run_that_waits_says_what_it_waits_for(engine: Engine, clock: Clock):
    """The page says what the CLI says: a run waiting for a place in its pool waits for
    that, not for upstreams it does not have."""
    scheduler = Scheduler(engine)
    scheduler.set_pool("full", 0)
    pooled = JobSpec("p", "pooled", "triggered", kind="noop", controls={"pool": "full"})
    scheduler.apply([pooled], project="p")
    c = client(engine, clock, CREDENTIALS)
    token = re.search(rf'name="{csrf.FIELD}" value="(\w+)"', page(c, "/jobs/p/pooled", AUTH))
    assert token is not None
    answer = c.post(
        "/jobs/p/pooled/trigger", data={csrf.FIELD: token.group(1)}, headers=AUTH | SAME_SITE
    )
    assert answer.status_code == 303 and "done=waiting_pool" in answer.location
    shown = page(c, answer.location.split("localhost", 1)[-1], AUTH)
    assert "is WAITING for a place in its pool" in shown


def test_history_says_when_runs_started_and_ended_and_what_they_took(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """Each run of the history with its last attempt's start and the run's end (how long
    ago; exact, in the job's zone and in UTC, on hover), what it took and its attempt,
    newest first."""
    scheduler = Scheduler(engine)
    job = JobSpec("p", "t", "triggered", timezone="Europe/Paris", kind="noop")
    scheduler.apply([job], project="p")
    for _ in range(2):
        scheduler.trigger("p/t")
        deliver_ticks_and_starts(engine, port)
        deliver_runs(engine, port)
    started = clock.now - timedelta(seconds=300, microseconds=-123456)
    with engine.db.begin() as conn:  # the older run's third attempt took 2.5 s, 5 min ago
        conn.execute(
            update(invocations)
            .where(invocations.c.id == select(func.min(invocations.c.id)).scalar_subquery())
            .values(started_at=started, finished_at=started + timedelta(seconds=2.5), attempt=3)
        )
    text = page(client(engine, clock), "/jobs/p/t")
    rows = re.findall(r"<tr><td><a href=\"/jobs/p/t/runs/\d+\">(\d+)</a></td>.*?</tr>", text, re.S)
    assert rows == sorted(rows, key=int, reverse=True) and len(rows) == 2
    older = re.search(rf"<tr><td><a [^>]*>{min(rows, key=int)}</a></td>.*?</tr>", text, re.S)
    assert older is not None
    cells = dict(re.findall(r'<td class="(\w+)"[^>]*>(.*?)</td>', older.group(0)))
    assert cells["took"] == "2.5 s" and cells["attempts"] == "3"
    exact = (
        '<time datetime="2026-03-01T11:55:00Z"'
        ' title="2026-03-01 12:55:00 CET (2026-03-01T11:55:00Z)">'
    )
    assert cells["started"] == f"{exact}5 min ago</time>"
    assert cells["finished"].endswith(">4 min ago</time>")
