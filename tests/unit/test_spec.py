from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.jobspec import MAX_SPEC_BYTES, JobSpec, load_job_file

GOOD = """
project: demo
jobs:
  - name: ping
    schedule: every 5s
    noop: {}
  - name: features
    schedule: "0 2 * * *"
    timezone: Europe/Berlin
    celery: {task: features.build, queue: etl, kwargs: {full: true}}
  - name: hook
    schedule: "*/15 * * * *"
    http: {url: "https://example.org/hook", method: POST, timeout: 10s}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def test_the_issue_example_loads(tmp_path: Path):
    job_file = load_job_file(write(tmp_path, GOOD))
    assert job_file.project == "demo"
    ping, features, hook = job_file.jobs
    assert ping.options == {"sleep": 0.0, "fail": False}
    assert features.options == {
        "task": "features.build",
        "queue": "etl",
        "args": [],
        "kwargs": {"full": True},
    }
    assert hook.options["timeout"] == 10.0 and hook.options["method"] == "POST"
    assert features.id == "demo/features"


def test_revision_follows_meaning_not_spelling():
    a = JobSpec("p", "j", "every 5s", options={"sleep": "1s"})
    b = JobSpec("p", "j", "every  5s", options={"sleep": 1})
    c = JobSpec("p", "j", "every 6s")
    assert a.revision == b.revision != c.revision


BAD = [
    ("schedule: 'nope'\n    noop: {}", "job 'x': schedule:"),
    ("schedule: every 1s\n    timezone: Nowhere/City\n    noop: {}", "job 'x': timezone:"),
    ("schedule: every 1s", "job 'x': kind: exactly one of noop, http, celery is required"),
    ("schedule: every 1s\n    noop: {}\n    http: {url: 'http://a'}", "(noop and http)"),
    ("schedule: every 1s\n    shell: {}", "job 'x': shell: unknown field"),
    ("schedule: every 1s\n    noop: {slep: 1}", "job 'x': noop.slep: unknown field"),
    ("schedule: every 1s\n    http: {url: 'ftp://a'}", "job 'x': http.url:"),
    ("schedule: every 1s\n    celery: {queue: q}", "job 'x': celery.task: is required"),
    ("schedule: every 1s\n    celery: {task: t, args: 3}", "job 'x': celery.args: must be"),
]


@pytest.mark.parametrize(("body", "message"), BAD)
def test_bad_jobs_name_the_file_the_job_and_the_field(tmp_path: Path, body: str, message: str):
    path = write(tmp_path, f"project: demo\njobs:\n  - name: x\n    {body}\n")
    with pytest.raises(SpecError) as err:
        load_job_file(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_duplicate_names(tmp_path: Path):
    path = write(
        tmp_path,
        "project: d\njobs:\n- {name: a, schedule: every 1s, noop: {}}\n"
        "- {name: a, schedule: every 2s, noop: {}}\n",
    )
    with pytest.raises(SpecError, match="job 'a': name: duplicate name"):
        load_job_file(path)


def test_oversized_payload(tmp_path: Path):
    big = "x" * MAX_SPEC_BYTES
    with pytest.raises(SpecError, match="celery: the job is .* bytes; the limit is 65536"):
        JobSpec("d", "a", "every 1s", kind="celery", options={"task": "t", "args": [big]})


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "project: 3\njobs: []",
        "jobs: []",
        "project: p\nx: 1",
        "project: p\njobs: {a: 1}",
        "project: p\njobs: [: bad",
    ],
)
def test_malformed_files(tmp_path: Path, text: str):
    with pytest.raises(SpecError, match=str(tmp_path)):
        load_job_file(write(tmp_path, text))


def test_bad_names():
    with pytest.raises(SpecError, match="name:"):
        JobSpec("demo", "a/b", "every 1s")


def test_controls_are_validated_and_only_non_defaults_kept():
    spec = JobSpec(
        "p",
        "j",
        "every 5s",
        controls={"lease": "60s", "timeout": "2h", "retries": {"max_attempts": 3}},
    )
    assert spec.controls == {"timeout": 7200.0, "retries": {"max_attempts": 3}}
    assert (
        JobSpec("p", "j", "every 5s", controls={"lease": 60}).revision
        == JobSpec("p", "j", "every 5s").revision
    )  # a default spelled out does not change the revision


def test_misfire_controls_reach_the_policy():
    from cronchain.scheduler.spec.controls import Controls
    from cronchain.statemachine import Misfire

    spec = JobSpec(
        "p", "j", "every 5s", controls={"misfire": "all", "misfire_grace": "1m", "catchup_limit": 7}
    )
    assert spec.controls == {"misfire": "all", "misfire_grace": 60.0, "catchup_limit": 7}
    policy = Controls.of(spec.controls).misfire
    assert (policy.mode, policy.grace, policy.catchup_limit) == (
        Misfire.ALL,
        timedelta(minutes=1),
        7,
    )
    default = Controls.of(JobSpec("p", "j", "every 5s", controls={"misfire": "latest"}).controls)
    assert (default.misfire.mode, default.misfire.grace) == (Misfire.LATEST, None)


def test_the_three_timeouts_have_their_own_names_and_defaults():
    from cronchain.scheduler.spec.controls import Controls

    spec = JobSpec("p", "j", "every 5s", controls={"schedule_to_start": "10m", "lease": "20s"})
    assert spec.controls == {"schedule_to_start": 600.0, "lease": 20.0}
    controls = Controls.of(spec.controls)
    assert (controls.schedule_to_start, controls.lease, controls.timeout) == (
        timedelta(minutes=10),
        timedelta(seconds=20),
        None,
    )
    default = Controls.of({})
    assert default.schedule_to_start == timedelta(hours=1)  # a worker outage of minutes waits
    assert JobSpec("p", "j", "every 5s", controls={"schedule_to_start": "1h"}).controls == {}


BAD_CONTROLS = [
    ({"lease": "0.5s"}, "lease: must be at least 1s"),
    ({"schedule_to_start": "0.5s"}, "schedule_to_start: must be at least 1s"),
    ({"overlap": "queue"}, "overlap: 'queue' is not one of"),
    ({"max_buffered": 5}, "max_buffered: only applies with overlap: buffer_all"),
    ({"overlap": "allow", "max_concurrent": 0}, "max_concurrent: must be a whole number"),
    ({"retries": {"max_attempts": 3, "tries": 1}}, "retries.tries: unknown field"),
    ({"retries": {"jitter": 2}}, "retries.jitter: must be a fraction"),
    ({"retries": {"backoff": "1m", "max_backoff": "10s"}}, "retries.max_backoff"),
    ({"triggers": "b"}, "triggers: must be a list"),
    ({"triggers": ["j"]}, "triggers: a job cannot trigger itself"),
    ({"misfire": "some"}, "misfire: 'some' is not one of skip, latest, all"),
    ({"catchup_limit": 5}, "catchup_limit: only applies with misfire: all"),
    ({"misfire": "all", "catchup_limit": 0}, "catchup_limit: must be a whole number"),
    ({"misfire_grace": "soon"}, "misfire_grace: 'soon' is not a duration"),
]


@pytest.mark.parametrize(("controls", "message"), BAD_CONTROLS)
def test_bad_controls_name_the_field(controls: dict, message: str):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        JobSpec("p", "j", "every 5s", controls=controls)


def test_a_trigger_must_name_a_job_of_the_file(tmp_path: Path):
    text = "project: p\njobs:\n  - {name: a, schedule: every 1s, noop: {}, triggers: [b]}\n"
    with pytest.raises(SpecError, match="job 'a': triggers: no job named 'b'"):
        load_job_file(write(tmp_path, text))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"accept": [200, "2x"]}, "http.accept: '2x'"),
        ({"max_redirects": 50}, "http.max_redirects"),
        ({"headers": {"Auth": {"secret": ""}}}, "http.headers.Auth"),
        ({"headers": {"Auth": {"vault": "x"}}}, "http.headers.Auth"),
        ({"headers": {"Auth": {}}}, "http.headers.Auth"),
        ({"headers": {"Auth": {"secret": "x", "env": "Y"}}}, "http.headers.Auth"),
        ({"headers": {"X": "a\r\nInjected: 1"}}, "http.headers.X: must not contain line breaks"),
        ({"headers": {"Bad Name": "x"}}, "http.headers: 'Bad Name'"),
        ({"headers": {"X": "\u0100"}}, "http.headers.X: must be printable ASCII"),
        ({"url": "http://example.com/\u00e9"}, "http.url: must be printable ASCII"),
        ({"url": "http://user:pw@example.com/"}, "http.url: must not hold credentials"),
    ],
)
def test_bad_http_options_name_the_field(options: dict, message: str):
    with pytest.raises(SpecError, match=message):
        JobSpec("p", "h", "every 5s", kind="http", options={"url": "https://e.org", **options})


def test_the_debug_log_keeps_its_start_and_end():
    from cronchain.scheduler import debuglog

    text = None
    for n in range(2000):
        text = debuglog.append(text, datetime(2026, 1, 1, tzinfo=UTC), f"line {n}")
    assert text is not None and len(text) <= debuglog.LIMIT
    assert "line 0\n" in text and "line 1999\n" in text and "characters trimmed" in text


def test_debug_log_stamps_each_line_in_utc_whatever_zone_now_is_in():
    """The stamp of a ``now`` is kept: an equal instant in another zone must not read
    as the other zone's wall clock with a ``Z``."""
    from cronchain.scheduler import debuglog

    at = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    paris = at.astimezone(timezone(timedelta(hours=1)))
    for now in (paris, at, at + timedelta(seconds=1), paris):
        line = debuglog.append(None, now, "x")
        assert line == f"{now.astimezone(UTC):%Y-%m-%dT%H:%M:%S}.123Z x\n"


@pytest.mark.parametrize("empty", [{}, None, []])
def test_empty_celery_kwargs_and_args_are_none_given(empty: object):
    """``kwargs: {}`` was refused as "is required" (an empty mapping read as missing)."""
    plain = JobSpec("p", "n", "@daily", kind="celery", options={"task": "t"})
    given = JobSpec("p", "n", "@daily", kind="celery", options={"task": "t", "kwargs": empty})
    assert given.options == plain.options and given.revision == plain.revision
    if empty is not None:
        args = JobSpec("p", "n", "@daily", kind="celery", options={"task": "t", "args": []})
        assert args.revision == plain.revision
