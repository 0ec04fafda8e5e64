"""The page never answers 500 for its input (issue 34): every route, walked with what a
user or a scanner sends (NULs, bad UTF-8, huge numbers, missing parts, markup), answers
400, 404 or 409, on SQLite and PostgreSQL; a control a job cannot take answers 409."""

from __future__ import annotations

import itertools

import pytest
from flask.testing import FlaskClient

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import CronchainError
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.web import csrf
from cronchain.statemachine import InvalidTransition
from tests.support.engine import Clock
from tests.support.web import AUTH, CREDENTIALS, SAME_SITE, client

pytestmark = pytest.mark.postgres

# Path parts and query values as a scanner sends them, percent-encoded as on the wire.
ODD = [
    "%00",
    "a%00b",
    "%ff",  # not UTF-8
    "%c3%28",  # a broken two-byte sequence
    "%ed%a0%80",  # a lone surrogate, encoded
    "99999999999999999999999",
    "-1",
    "0",
    "1e309",
    "%C2%B2",  # a digit to str.isdigit, not to int()
    "9" * 5000,  # past int()'s 4,300 digits
    "%2F",
    "..",
    "a" * 3000,
    "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    "%0d%0aSet-Cookie:%20x=1",
    "p%2Fa",
]
QUERY = {  # the parameters each page reads
    "/": ("project", "state", "outcome", "q", "sort", "page", "after", "before"),
    "/jobs/p/a": ("before", "at", "done", "n"),
}
ACTIONS = ("pause", "resume", "trigger", "abort", "nothing")
FORM = ("reason", "catch_up")


@pytest.fixture
def pages(engine: Engine, clock: Clock) -> FlaskClient:
    Scheduler(engine).apply(
        [JobSpec("p", "a", "every 10s"), JobSpec("p", "b", "triggered")], project="p"
    )
    return client(engine, clock, CREDENTIALS)


def status(c: FlaskClient, method: str, path: str, form: dict[str, str] | None = None) -> int:
    headers = {**AUTH, **SAME_SITE}
    if method == "GET":
        return c.get(path, headers=headers).status_code
    data = {csrf.FIELD: csrf.token(CREDENTIALS), **(form or {})}
    return c.post(path, headers=headers, data=data).status_code


def walk(c: FlaskClient) -> dict[tuple[str, str], int]:
    """Every route with every odd value in each of its parts and parameters: the status
    each answered, by (method, path)."""
    answers: dict[tuple[str, str], int] = {}

    def ask(method: str, path: str, form: dict[str, str] | None = None) -> None:
        answers[(method, path + (f" {form}" if form else ""))] = status(c, method, path, form)

    for odd in ODD:
        for path in (
            *(f"/jobs/{odd}/a", f"/jobs/p/{odd}", f"/jobs/{odd}", f"/{odd}"),
            *(f"/jobs/p/a/runs/{odd}", f"/jobs/{odd}/a/runs/1", f"/jobs/p/{odd}/runs/1"),
        ):
            ask("GET", path)
        for page, names in QUERY.items():
            for name in names:
                ask("GET", f"{page}?{name}={odd}")
        for action in ACTIONS:
            ask("POST", f"/jobs/{odd}/a/{action}")
            ask("POST", f"/jobs/p/{odd}/{action}")
        ask("POST", f"/jobs/p/a/{odd}")
    for action, field in itertools.product(ACTIONS, FORM):
        for value in ("\x00", "\ufffe", "x" * 100_000, "<b>", "\r\n"):
            ask("POST", f"/jobs/p/b/{action}", {field: value})
    for path in ("/jobs", "/jobs/", "/jobs/p", "/jobs/p/", "/jobs/p/a/", "/metrics?x=%00"):
        ask("GET", path)
    return answers


def test_no_route_answers_500_for_its_input(pages: FlaskClient):
    answers = walk(pages)
    assert len(answers) > 300
    failed = {what: code for what, code in answers.items() if code >= 500}
    assert failed == {}


def test_a_bad_parameter_is_400_and_a_job_no_name_can_hold_is_404(pages: FlaskClient):
    assert status(pages, "GET", "/jobs/p/a?before=99999999999999999999999") == 400
    assert status(pages, "GET", "/jobs/p/a?before=x") == 400
    assert status(pages, "GET", "/?page=%00") == 400
    assert status(pages, "GET", "/?state=%00") == 400
    assert status(pages, "GET", "/?q=%00") == 200  # a search no job's name holds: none
    assert status(pages, "GET", "/jobs/p/a/runs/99999999999999999999999") == 404
    assert status(pages, "GET", "/jobs/%00/x") == 404
    assert status(pages, "GET", "/?project=%00") == 400
    assert status(pages, "POST", "/jobs/p/a/pause", {"reason": "a\x00b"}) == 400


STATES = ("scheduled", "paused", "disabled")


def put_in(engine: Engine, state: str) -> None:
    """Jobs ``p/a`` and ``p/twin`` (every 10s) in ``state``; ``p/b`` stays as it is."""
    jobs = [JobSpec("p", n, "every 10s") for n in ("a", "twin")] + [JobSpec("p", "b", "triggered")]
    Scheduler(engine).apply(jobs, project="p")
    if state == "paused":
        for name in ("a", "twin"):
            Scheduler(engine).pause(f"p/{name}")
    if state == "disabled":  # retired: no longer in the file, kept disabled
        Scheduler(engine).apply([JobSpec("p", "b", "triggered")], project="p")


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", ACTIONS[:4])
def test_each_control_answers_409_where_the_cli_refuses_it(
    engine: Engine, clock: Clock, state: str, action: str
):
    """The page's answer is the CLI's: what ``Scheduler`` refuses (a paused or disabled
    job's trigger, ...) is 409, with the reason; what it takes redirects (303)."""
    put_in(engine, state)
    sched = Scheduler(engine)
    twin = {"pause": sched.pause, "resume": sched.resume, "trigger": sched.trigger}
    try:
        twin.get(action, sched.abort)("p/twin")
        expected = 303
    except (InvalidTransition, CronchainError):  # as the CLI refuses it, with exit 2
        expected = 409
    c = client(engine, clock, CREDENTIALS)
    answer = c.post(
        f"/jobs/p/a/{action}",
        headers={**AUTH, **SAME_SITE},
        data={csrf.FIELD: csrf.token(CREDENTIALS)},
    )
    assert answer.status_code == expected, answer.get_data(as_text=True)
    if (state, action) in (("paused", "trigger"), ("disabled", "trigger")):
        assert expected == 409  # the refusals this test is about do happen
