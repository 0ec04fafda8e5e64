"""Random bytes from outside, through the real invokers into PostgreSQL and SQLite
(issue 34): whatever an endpoint answers (its body, its headers), a task raises, a gate
says or a heartbeat notes (NUL, lone surrogates, CR/LF, escapes, markup, 1 MB), the run
ends once, with the outcome the endpoint meant, and nothing is left RUNNING.

``celery`` tasks are reported here as the worker's hooks report them (``outside.described``
of what the task raised, then ``Runs.report``); ``tests/e2e/test_celery_kind.py`` raises
NUL text in a real worker.

One accepted difference, not drawn here: a response header line over 64 KiB (or over
100 headers) fails the attempt (reason ``launch``) whatever the status said, as Python's
http.client refuses it, and curl and browsers refuse a head that size too
(``test_a_head_past_http_s_limits_fails_once``)."""

from __future__ import annotations

import itertools
import random

import pytest
import sqlalchemy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronchain.scheduler import outside
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.invokers import Outcome
from tests.support.deliver import ask_due, settle, started_celery_run
from tests.support.engine import Clock, http_engine
from tests.support.jobs import apply, spec
from tests.support.receivers import http_answer, raw_endpoint
from tests.support.rows import rows

pytestmark = pytest.mark.postgres
MB = 1 << 20
NASTY_TEXT = ["\x00", "\ud800", "\udfff", "\r", "\n", "\r\n", "\x1b[2J", "\ufffe", "é", "😀"]
NASTY_TEXT += ["<!channel>", "&amp;", "*bold*", "%s", "{0}", "\\x00", "'\"", "\t"]
NASTY_BYTES = [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xc3", b"\r\n", b"\x1b[31m", b"\xf0\x9f"]
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI stays green or red for a cause
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_names = itertools.count()


def megabyte_text(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(NASTY_TEXT + ["x" * 97]) for _ in range(MB // 50))[:MB]


def megabyte_bytes(seed: int) -> bytes:
    rng = random.Random(seed)
    data = bytearray(rng.randbytes(MB))
    for _ in range(200):
        at = rng.randrange(MB)
        data[at : at + 3] = rng.choice(NASTY_BYTES)
    return bytes(data[:MB])


texts = st.one_of(
    st.lists(st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=30)), max_size=40).map(
        "".join
    ),
    st.integers(0, 3).map(megabyte_text),
)
bodies = st.one_of(
    st.lists(st.one_of(st.sampled_from(NASTY_BYTES), st.binary(max_size=50)), max_size=40).map(
        b"".join
    ),
    st.integers(0, 3).map(megabyte_bytes),
)
# A header value as an endpoint may send one: any byte, CR and LF included (a line that
# breaks the head's framing still leaves the status line, which is what was meant).
header_values = st.lists(
    st.one_of(st.sampled_from(NASTY_BYTES), st.binary(max_size=40)), max_size=30
).map(b"".join)


def name() -> str:
    return f"j{next(_names)}"


@EXAMPLES
@given(status=st.sampled_from(["200 OK", "503 No"]), body=bodies, header=header_values)
def test_an_http_answer_of_any_bytes_ends_the_run_once_as_its_status_says(
    db: sqlalchemy.Engine, clock: Clock, status: str, body: bytes, header: bytes
):
    engine, port = http_engine(db, clock)
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n".encode()
    with raw_endpoint(head + b"X-Noise: " + header + b"\r\n\r\n" + body) as endpoint:
        job = name()
        apply(engine, spec(job, kind="http", options={"url": endpoint.url}))
        Scheduler(engine).trigger(f"p/{job}")
        settle(engine, port)
    [run] = rows(engine, job)
    meant = "SUCCEEDED" if status.startswith("200") else "FAILED"
    assert (run["status"], run["attempt"]) == (meant, 1), run["error"]
    assert len(endpoint.requests) == 1
    if meant == "FAILED":
        assert run["reason"] == "status"
    assert f"answered {status[:3]}" in run["log"]  # kept, not dropped (``without_text``)
    assert "could not be stored" not in run["log"]


@EXAMPLES
@given(text=texts)
def test_a_task_error_of_any_text_fails_its_run_once(
    db: sqlalchemy.Engine, clock: Clock, text: str
):
    engine, port = http_engine(db, clock)
    job = name()
    apply(engine, spec(job, kind="celery", options={"task": "t.boom"}))
    run = started_celery_run(engine, port, job)
    lease = engine.leases.hold(Lease(run["id"], 1, port.runs[-1].lease, job_id=run["job_id"]))
    failed = Outcome.failed(outside.described(ValueError(text)), "error")
    assert engine.runs.report(lease, failed)  # as the hooks report what the task raised
    assert engine.leases._held == set()
    [ended] = rows(engine, job)
    assert (ended["status"], ended["attempt"]) == ("FAILED", 1)
    assert ended["error"].startswith("ValueError") and len(ended["error"]) <= 4 * 1024
    assert "could not be stored" not in ended["error"]  # kept, not dropped


@EXAMPLES
@given(status=st.sampled_from(["200 OK", "503 No"]), body=bodies)
def test_a_gate_answer_of_any_bytes_is_recorded_and_decides_as_its_status_says(
    db: sqlalchemy.Engine, clock: Clock, status: str, body: bytes
):
    engine, port = http_engine(db, clock)
    with raw_endpoint(http_answer(status, body)) as endpoint:
        job = name()
        gate = {"name": "ready", "http": endpoint.url, "every": "10s"}
        apply(engine, spec(job, gates=[gate], max_wait="5s", on_unmet="fail"))
        Scheduler(engine).trigger(f"p/{job}")
        assert ask_due(engine, port, clock) == 1  # the one check there is
        settle(engine, port)
    [run] = rows(engine, job)
    [said] = [a["said"] for a in run["checks"]["gate"]["gates"][0]["answers"]]
    assert said.startswith(f"answered {status[:3]}")
    if status.startswith("200"):
        assert run["status"] == "SUCCEEDED"
    else:
        assert (run["status"], run["reason"]) == ("FAILED", "gate")
    assert len(endpoint.requests) == 1


@EXAMPLES
@given(note=texts)
def test_a_heartbeat_note_of_any_text_renews_the_lease(
    db: sqlalchemy.Engine, clock: Clock, note: str
):
    engine, port = http_engine(db, clock)
    job = name()
    apply(engine, spec(job, kind="celery", options={"task": "t.x"}))
    run = started_celery_run(engine, port, job)
    lease = Lease(run["id"], 1, port.runs[-1].lease, job_id=run["job_id"])
    assert engine.leases.renew(lease, note) is True
    assert lease.failures == 0


def test_a_head_past_http_s_limits_fails_once(db: sqlalchemy.Engine, clock: Clock):
    """The accepted difference: a header line of 1 MB fails the attempt, whatever its
    status said; the endpoint is called once, and the error says why."""
    engine, port = http_engine(db, clock)
    huge = b"X-Noise: " + b"a" * MB + b"\r\n"
    with raw_endpoint(b"HTTP/1.1 200 OK\r\n" + huge + b"Content-Length: 0\r\n\r\n") as endpoint:
        apply(engine, spec("h", kind="http", options={"url": endpoint.url}))
        Scheduler(engine).trigger("p/h")
        settle(engine, port)
    [run] = rows(engine, "h")
    assert (run["status"], run["reason"], run["attempt"]) == ("FAILED", "launch", 1)
    assert "header" in run["error"] and len(endpoint.requests) == 1
