"""What went wrong, as the site's own page: a refusal (409) in a sentence that says what
to do, a missing job (404) and a failure of the page itself (500) in the page's style,
with a way back; and the controls ask before they act (the page's script reads
``data-confirm``; tests/e2e/test_browser.py clicks them)."""

from __future__ import annotations

import re

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import pages
from cronchain.scheduler.web import csrf
from tests.support.engine import Clock
from tests.support.web import AUTH, CREDENTIALS, SAME_SITE, client


@pytest.fixture
def paused(engine: Engine) -> Engine:
    Scheduler(engine).apply([JobSpec("p", "a", "every 10s", kind="noop")], project="p")
    Scheduler(engine).pause("p/a")
    return engine


def test_a_refused_control_says_why_and_what_to_do(paused: Engine, clock: Clock):
    answer = client(paused, clock, CREDENTIALS).post(
        "/jobs/p/a/trigger", headers=AUTH | SAME_SITE, data={csrf.FIELD: csrf.token(CREDENTIALS)}
    )
    assert answer.status_code == 409
    text = answer.get_data(as_text=True)
    assert "<h1>Refused</h1>" in text and 'href="/static/cronchain.css"' in text
    assert (
        "p/a was not triggered: cannot trigger a job that is SUSPENDED."
        " It is paused: resume it first." in text
    )
    assert '<a href="/jobs/p/a">Back to the job</a>' in text


def test_a_missing_page_is_the_sites_own(paused: Engine, clock: Clock):
    answer = client(paused, clock).get("/jobs/p/nope")
    assert answer.status_code == 404
    text = answer.get_data(as_text=True)
    assert "<h1>Not found</h1>" in text and "no job p/nope" in text
    assert '<a href="/">All jobs</a>' in text


def test_a_failure_of_the_page_shows_no_trace(
    paused: Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    def broken(*args: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(pages, "job_line", broken)
    answer = client(paused, clock).get("/jobs/p/a")
    assert answer.status_code == 500
    text = answer.get_data(as_text=True)
    assert "<h1>Something went wrong on cronchain&#39;s side</h1>" in text
    assert "secret internals" not in text and "Traceback" not in text


def test_what_prometheus_and_probes_ask_stays_plain_text(paused: Engine, clock: Clock):
    c = client(paused, clock)
    assert c.get("/metrics/nothing").mimetype == "text/plain"
    wrong = c.post("/metrics")
    assert (wrong.status_code, wrong.mimetype) == (405, "text/plain")
    assert "GET" in wrong.headers["Allow"]  # a 405 still says what is allowed


def test_a_refusals_way_back_is_its_jobs_page_and_no_other(paused: Engine, clock: Clock):
    c = client(paused, clock, CREDENTIALS)
    form = {csrf.FIELD: csrf.token(CREDENTIALS)}
    odd = c.post("/%5Cevil.example/x", headers=AUTH | SAME_SITE, data=form)
    assert odd.status_code in (404, 405) and "Back to the job" not in odd.text


def test_each_control_asks_before_it_acts(paused: Engine, clock: Clock):
    text = client(paused, clock, CREDENTIALS).get("/jobs/p/a", headers=AUTH).text
    asks = dict(re.findall(r'action="/jobs/p/a/(\w+)" data-confirm="([^"]+)"', text))
    assert asks == {
        "resume": "Resume p/a?",
        "trigger": "Run p/a now, once, beside its schedule?",
        "abort": "Abort every active and waiting run of p/a?",
    }
