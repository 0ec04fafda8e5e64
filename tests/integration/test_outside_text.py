"""Text from outside is data (issue 34): a NUL, a lone surrogate, markup or a CR from an
endpoint, a task, a gate or a file never blocks a job, runs it twice or loses a run.

PostgreSQL refuses NUL in text and JSON, and neither database takes a lone surrogate;
``scheduler.outside`` replaces each with U+FFFD and says so in the recorded text."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from cronchain.scheduler import outside
from cronchain.scheduler.alerts import channels
from cronchain.scheduler.alerts.channels import Alert
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.cli.text import invocation_text
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.queries.explain import _with_alerts
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.alert_store import AlertRow
from cronchain.scheduler.workers import gatecheck, work
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import ask_due, settle, started_celery_run
from tests.support.engine import Clock, engine_with, http_engine
from tests.support.jobs import apply, spec
from tests.support.receivers import http_answer, raw_endpoint, smtp_server, webhook
from tests.support.rows import alert_rows, rows
from tests.support.upstream import needs
from tests.support.web import client

pytestmark = pytest.mark.postgres
S = InvocationStatus
NOTE = "[cronchain replaced 1 character(s) it cannot store with U+FFFD]"


def test_an_http_answer_with_a_nul_in_its_body_succeeds_and_is_called_once(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with raw_endpoint(http_answer("200 OK", b"ab\x00cd")) as endpoint:
        apply(
            engine,
            spec("h", kind="http", options={"url": endpoint.url}, retries={"max_attempts": 3}),
        )
        Scheduler(engine).trigger("p/h")
        settle(engine, port)
        clock.advance(120)  # past the lease and any retry: nothing more happens
        settle(engine, port)
    [run] = rows(engine, "h")
    assert (run["status"], run["attempt"], run["error"]) == ("SUCCEEDED", 1, None)
    assert len(endpoint.requests) == 1
    assert f"answered 200: ab\ufffdcd {NOTE}" in run["log"]


def test_a_task_error_with_nul_and_control_bytes_fails_the_run_once(
    db: sqlalchemy.Engine, clock: Clock
):
    """As a ``celery`` task's hooks report it (``ValueError("bad bytes: \\x00\\x01")``):
    the run ends FAILED with the error, and the job takes its next run."""
    engine, port = engine_with(db, clock)
    apply(engine, spec("c", kind="celery", options={"task": "t.boom"}))
    run = started_celery_run(engine, port)
    error = outside.described(ValueError("bad bytes: \x00\x01"))
    engine.runs.record_patiently(run["id"], 1, Outcome.failed(error, "error"))
    [run] = rows(engine, "c")
    assert run["status"] == "FAILED"
    assert run["error"] == f"ValueError: bad bytes: \ufffd\x01 {NOTE}"
    assert Scheduler(engine).trigger("p/c")["result"] == "started"  # not blocked


def test_a_gate_answer_with_nul_is_recorded_and_its_failure_alerts(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CRONCHAIN_CHANNELS", '{"ops": {"webhook": "http://127.0.0.1:9/x"}}')
    engine, port = http_engine(db, clock)
    with raw_endpoint(http_answer("503 No", b"not\x00yet")) as endpoint:
        gate = {"name": "ready", "http": endpoint.url, "every": "10s"}
        alerts = {"on": ["failed"], "to": ["ops"]}
        job = spec("g", gates=[gate], max_wait="15s", on_unmet="fail", alerts=alerts)
        apply(engine, job)
        Scheduler(engine).trigger("p/g")
        assert ask_due(engine, port, clock) == 1
        clock.advance(10)
        assert ask_due(engine, port, clock) == 1
    [run] = rows(engine, "g")
    assert (run["status"], run["reason"]) == ("FAILED", "gate")
    said = [a["said"] for a in run["checks"]["gate"]["gates"][0]["answers"]]
    assert said == [f"answered 503: not\ufffdyet {NOTE}"] * 2
    assert "no answer" not in run["error"] and "not\ufffdyet" in run["error"]
    [alert] = alert_rows(engine)
    assert alert["event"] == "failed" and "not\ufffdyet" in alert["detail"]


def test_a_celery_gate_answer_with_nul_is_recorded(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)

    class Tasks:
        def send_task(self, name: str, **options: Any) -> None:
            pass

    apply(engine, spec("g", gates=[{"celery": "app.ready", "every": "10s"}], max_wait="1m"))
    Scheduler(engine).trigger("p/g")
    assert ask_due(engine, port, clock, Tasks()) == 1
    [run] = rows(engine, "g")
    gatecheck.record(engine, run["id"], "app.ready", 1, run["job_id"], False, "returned 'a\x00'")
    [run] = rows(engine, "g")
    [said] = [a["said"] for a in run["checks"]["gate"]["gates"][0]["answers"]]
    assert said == f"returned 'a\ufffd' {NOTE}"


def test_an_outcome_whose_text_cannot_be_stored_is_recorded_without_it(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: Any
):
    """Were the boundary to miss a character the database refuses, the outcome is still
    recorded, without its text, and no attempt fails for it."""
    monkeypatch.setattr(outside, "storable", lambda text: text)  # the boundary misses it
    engine, port = engine_with(db, clock)
    apply(engine, spec("c", kind="celery", options={"task": "t.x"}))
    run = started_celery_run(engine, port)
    unstorable = "\ud800" if db.dialect.name == "sqlite" else "\x00"
    with caplog.at_level(logging.ERROR):
        engine.runs.record_patiently(run["id"], 1, Outcome(S.SUCCEEDED, log=(unstorable,)))
    [run] = rows(engine, "c")
    assert (run["status"], run["attempt"]) == ("SUCCEEDED", 1)
    assert "its text could not be stored" in run["log"]
    assert any("again without its text" in r.getMessage() for r in caplog.records)


def test_a_gate_answer_whose_text_cannot_be_stored_is_recorded_without_it(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """The same net under gate answers: the answer counts (a yes starts the run)."""
    monkeypatch.setattr(outside, "storable", lambda text: text)  # the boundary misses it
    engine, port = engine_with(db, clock)
    apply(engine, spec("g", gates=[{"celery": "app.ready", "every": "10s"}], max_wait="1m"))
    Scheduler(engine).trigger("p/g")
    [run] = rows(engine, "g")
    unstorable = "\ud800" if db.dialect.name == "sqlite" else "\x00"
    gatecheck.record(engine, run["id"], "app.ready", 1, run["job_id"], True, unstorable)
    [run] = rows(engine, "g")
    [said] = [a["said"] for a in run["checks"]["gate"]["gates"][0]["answers"]]
    assert said == "its text could not be stored" and run["status"] == "RUNNING"


def test_an_outcome_that_cannot_be_recorded_lets_the_lease_lapse(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: Any
):
    """Any other failure to record: the lease is no longer renewed (the watchdog's rules
    apply), and the log says so at ERROR."""
    engine, _ = engine_with(db, clock)
    apply(engine, spec("n"))
    Scheduler(engine).trigger("p/n")
    [run] = rows(engine, "n")
    engine.attempts.start_invocation(run["id"])  # sent to the work path, not taken yet

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(engine.runs.together, "finish", broken)
    with caplog.at_level(logging.ERROR):
        assert work.execute(engine, run["id"], 1, "work@test", job_id=run["job_id"])
    assert engine.leases._held == set()
    logged = [r for r in caplog.records if r.levelno == logging.ERROR][-1]
    assert "not recorded" in logged.getMessage() and "lease" in logged.getMessage()


def test_a_lease_note_with_nul_is_kept(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply(engine, spec("c", kind="celery", options={"task": "t.x"}))
    run = started_celery_run(engine, port)
    call = port.runs[0]
    lease = Lease(run["id"], 1, call.lease, job_id=run["job_id"])
    assert engine.leases.renew(lease, "step\x00two") is True
    assert f"step\ufffdtwo {NOTE}" in rows(engine, "c")[0]["log"]


# --- what a user declares -------------------------------------------------------------

FILE = """
project: p
jobs:
  - name: a
    schedule: triggered
{entry}
"""


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('    celery: {task: t.x, kwargs: {note: "a\\0b"}}', "celery.kwargs.note"),
        ('    http: {url: "https://example.com/", method: POST, body: "\\0"}', "http.body"),
        ('    noop: {}\n    paused: "off\\0for now"', "paused"),
        ('    noop: {}\n    celery_x: 1\n    "k\\0": 2', None),  # an unknown key, named
    ],
)
def test_a_file_with_a_nul_is_refused_naming_the_field(
    pg_engine: Any, cli: Any, tmp_path: Path, entry: str, field: str | None
):
    path = tmp_path / "jobs.yaml"
    path.write_text(FILE.format(entry=entry))
    code, out, err = cli(pg_engine, "apply", str(path))
    assert code == 2, err
    if field is not None:
        assert f"{field}: holds a character that cannot be stored" in err, err
    assert Scheduler(pg_engine).jobs() == []


def test_a_declared_nul_is_refused_in_python_too(db: sqlalchemy.Engine, clock: Clock):
    with pytest.raises(SpecError, match=r"celery\.args: holds a character"):
        JobSpec("p", "a", "triggered", kind="celery", options={"task": "t", "args": [1, "\ud800"]})
    engine, _ = engine_with(db, clock)
    apply(engine, spec("a"))
    with pytest.raises(SpecError, match="reason: holds a character"):
        Scheduler(engine).pause("p/a", "maintenance\x00")


# --- where alerts go ------------------------------------------------------------------

HOSTILE = "<!channel> *URGENT* <https://evil.example/login|click to fix> & co"


def alert(detail: str) -> Alert:
    slot = datetime(2026, 3, 1, 12, tzinfo=UTC)
    return Alert(1, "p/a", "failed", slot, 7, detail, slot)


def test_slack_gets_the_text_escaped_and_as_plain_text():
    """Slack reads ``<``, ``>`` and ``&`` as markup: a gate's answer above would ping the
    whole channel and show a disguised link."""
    with webhook() as hook:
        channel = {"webhook": hook.url, "format": "slack"}
        channels.deliver(channel, alert(f"gate ready said no: {HOSTILE}"), 5.0)
    [(_, body)] = hook.posts
    assert body["mrkdwn"] is False
    assert "<" not in body["text"] and ">" not in body["text"]
    assert (
        "&lt;!channel&gt; *URGENT* &lt;https://evil.example/login|click to fix&gt; &amp; co"
        in (body["text"])
    )


def test_a_detail_with_cr_and_lf_is_mailed_in_the_body_under_a_fixed_subject():
    """A mail header refuses CR: the subject is cronchain's own words, and what came
    from outside goes in the body, where it cannot add a header."""
    detail = "boom\r\nBcc: victim@example.com\r\n\r\nforged body"
    with smtp_server() as box:
        channel = {"email": ["oncall@example.com"], "smtp": {"env": "SMTP"}}
        channels.deliver(channel, alert(detail), 5.0, env={"SMTP": box.url})
    [mail] = box.mails
    assert mail["Subject"] == "cronchain: p/a 2026-03-01T12:00:00+00:00 failed"
    assert mail["Bcc"] is None
    assert json.loads(mail.get_content())["detail"] == detail


def test_pagerduty_gets_its_summary_on_one_line():
    body = channels.body_of(
        {"webhook": "https://events.example/v2", "format": "pagerduty", "routing_key": "k"},
        alert("line one\r\nline two\x1b[31m"),
        {},
    )
    summary = body["payload"]["summary"]
    assert "\n" not in summary and "\r" not in summary and "\x1b" not in summary
    assert body["payload"]["custom_details"]["detail"] == "line one\r\nline two\x1b[31m"


# --- words ----------------------------------------------------------------------------


def test_a_wait_settled_without_a_start_is_not_still_waiting(db: sqlalchemy.Engine, clock: Clock):
    engine, _ = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a", max_wait="10m", on_unmet="fail")))
    Scheduler(engine).trigger("p/d")
    [d] = rows(engine, "d")
    assert "-> still waiting" in invocation_text(Scheduler(engine).invocation(d["id"]))
    clock.advance(601)
    assert watchdog.run_once(engine).settled == 1
    text = invocation_text(Scheduler(engine).invocation(d["id"]))
    assert "still waiting" not in text
    assert "-> not met: FAILED at 2026-03-01T12:10:01" in text, text


def test_an_upstream_wait_that_ran_anyway_says_so_on_both_sides(
    db: sqlalchemy.Engine, clock: Clock
):
    """``max_wait`` ran out and ``on_unmet: run`` started it: the wait records a release,
    but the upstream was not met; the CLI and the run's page both say so."""
    engine, _ = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a", max_wait="10m", on_unmet="run")))
    Scheduler(engine).trigger("p/d")
    clock.advance(601)
    assert watchdog.run_once(engine).settled == 1
    [d] = rows(engine, "d")
    text = invocation_text(Scheduler(engine).invocation(d["id"]))
    assert "waited for upstreams: " in text and "-> not met; started anyway at" in text, text
    page = client(engine, clock).get(f"/jobs/p/d/runs/{d['id']}").text
    assert "not met; started anyway (on_unmet: run)" in page and "released" not in page


def test_a_gate_wait_that_ran_anyway_says_so(db: sqlalchemy.Engine, clock: Clock):
    engine, port = http_engine(db, clock)
    with raw_endpoint(http_answer("503 No", b"")) as endpoint:
        gate = {"name": "ready", "http": endpoint.url, "every": "10s"}
        apply(engine, spec("g", gates=[gate], max_wait="5s", on_unmet="run"))
        Scheduler(engine).trigger("p/g")
        assert ask_due(engine, port, clock) == 1
        settle(engine, port)
    [run] = rows(engine, "g")
    text = invocation_text(Scheduler(engine).invocation(run["id"]))
    assert run["status"] == "SUCCEEDED"
    assert "-> not met; started anyway at" in text and "(on_unmet: run)" in text, text


def test_explain_names_the_channels_an_alert_did_not_reach():
    slot = datetime(2026, 3, 1, 12, tzinfo=UTC)
    raised = [
        AlertRow(1, 1, "p", "p/a", 7, slot, "failed", None, ["ok", "pager"],
                 {"ok": slot.isoformat()}, {"pager": "HTTP 500"}, "failed", 8, slot, None, None),
        AlertRow(2, 1, "p", "p/a", 7, slot, "recovered", None, ["ok", "pager"],
                 {}, {}, "pending", 0, slot, slot, None),
    ]  # fmt: skip
    text = _with_alerts({"text": "it ran"}, raised)["text"]
    assert "(pending: ok)" not in text
    assert "failed (failed: ok sent, pager not sent)" in text
    assert "recovered (pending: ok not yet, pager not yet)" in text


def test_a_header_value_http_cannot_carry_fails_without_quoting_it(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """A secret from the environment with a CR or LF: the request is not sent, and the
    error does not quote the value (http.client's message does, as a bytes repr that
    the redaction of the secret would not match)."""
    monkeypatch.setenv("TOKEN", "Bearer tok3n\r\nX-Evil: 1")
    engine, port = http_engine(db, clock)
    with raw_endpoint() as endpoint:
        headers = {"Authorization": {"env": "TOKEN"}}
        apply(engine, spec("h", kind="http", options={"url": endpoint.url, "headers": headers}))
        Scheduler(engine).trigger("p/h")
        settle(engine, port)
    [run] = rows(engine, "h")
    assert (run["status"], run["reason"]) == ("FAILED", "launch")
    assert "tok3n" not in run["error"] and "tok3n" not in run["log"]
    assert endpoint.requests == []
