"""Random values of every type in every field of a job (issue 14): each is refused with a
``SpecError`` naming the field, or it runs. Never a traceback, never a stored value that
makes every run fail.

"Runs" is checked with the code a run goes through, with nothing stubbed: the spec is
stored as JSON the way the database stores it (no NaN, no infinity) and read back; the
schedule gives its next slot and grace; the controls give every deadline a run computes
(schedule_to_start, lease, timeout, each retry's backoff); and the kind's invoker is
called: ``noop`` with its attempt already over (so it returns at once, but only after
using its sleep), ``http`` against a closed port on this machine (so it fails fast, but
only after building its request with every option).
"""

from __future__ import annotations

import json
import socket
import string
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Call, HttpInvoker, NoopInvoker, Outcome
from cronchain.scheduler.invokers.netguard import parse_allow
from cronchain.scheduler.spec.controls import Controls
from cronchain.scheduler.spec.jobspec import JobSpec, load_job_file

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
OVER = "noop: stopped, the attempt is no longer current"
BASE: dict[str, dict[str, Any]] = {
    "noop": {"name": "j", "schedule": "every 5s", "noop": {}},
    "http": {"name": "j", "schedule": "every 5s", "http": {"url": "http://example.com/"}},
    "celery": {"name": "j", "schedule": "every 5s", "celery": {"task": "t"}},
}
COMMON = [
    "name",
    "schedule",
    "timezone",
    "schedule_to_start",
    "lease",
    "timeout",
    "retries",
    "retries.max_attempts",
    "retries.backoff",
    "retries.max_backoff",
    "retries.jitter",
    "overlap",
    "max_buffered",
    "max_concurrent",
    "triggers",
    "misfire",
    "misfire_grace",
    "catchup_limit",
]
OPTIONS = {
    "noop": ["noop", "noop.sleep", "noop.fail"],
    "http": [
        "http",
        "http.url",
        "http.method",
        "http.timeout",
        "http.headers",
        "http.body",
        "http.accept",
        "http.max_redirects",
    ],
    "celery": ["celery", "celery.task", "celery.queue", "celery.args", "celery.kwargs"],
}
# A value of one field may be refused by the rule it shares with another.
RELATED = {
    "retries.backoff": {"retries.max_backoff"},
    "retries.max_backoff": {"retries.max_backoff"},
    "max_buffered": {"max_buffered"},
    "overlap": {"max_buffered", "max_concurrent"},
    "misfire": {"catchup_limit"},
    "timezone": {"timezone", "schedule"},
}
INTERESTING = [
    "5s", "1h30m", "0s", "0", "1ms", "0.5s", "366d", "367d", "99999999999d", "1e400s", "nan",
    "inf", "-5s", "*/5 * * * *", "45-45 3 * * *", "0 0 30 2 *", "every 1ms", "every 10s",
    "with 1m interval", "triggered", "@hourly", "Europe/Berlin", "Australia/Lord_Howe",
    "http://u:p@example.com/", "https://example.com/x", "http://example.com:99999/",
    "ftp://example.com/", "GET", "post", "skip", "buffer_all", "allow", "all", "latest",
    "2xx", "j", "p/j", "other", "a/b/c", "", " ", "\r\n",
]  # fmt: skip
TEXT = st.text(
    alphabet=st.characters(exclude_categories=("Cs",)) | st.sampled_from(string.printable),
    max_size=20,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 20, 100, 101, 1000, 10_000, 31_622_400, 31_622_401, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, 1e20, 1e300, 1e-300]),
    TEXT,
    st.sampled_from(INTERESTING),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def with_value(kind: str, path: str, value: Any) -> dict[str, Any]:
    entry = json.loads(json.dumps(BASE[kind]))
    *parents, last = path.split(".")
    target = entry
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return entry


def names_the_field(err: SpecError, path: str) -> bool:
    fields = {path} | RELATED.get(path, set())
    return any(err.field == f or err.field.startswith(f + ".") for f in fields)


def check_runs(spec: JobSpec) -> None:
    """What a run computes from the stored spec, raising whatever it would raise."""
    stored = json.loads(json.dumps(spec.normalized(), allow_nan=False))
    schedule = spec.parsed_schedule()
    slot = schedule.next_after(NOW)
    assert slot is None or slot > NOW
    schedule.latest_at_or_before(NOW)
    NOW + schedule.misfire_grace
    controls = Controls.of(stored)
    for wait in (controls.schedule_to_start, controls.lease, controls.timeout):
        if wait is not None:
            NOW + wait
    if controls.misfire.grace is not None:
        NOW + controls.misfire.grace
    for attempt in range(1, controls.retry.max_attempts):
        delay = controls.retry.delay(attempt, 0.999)
        assert delay is not None
        NOW + delay
    options = stored[spec.kind]
    if spec.kind == "noop":
        call = Call(1, 1, spec.id, slot, options, controls.lease, controls.timeout)
        call.lost.set()
        outcome = NoopInvoker().invoke(call)
        assert outcome.error in (None, "noop: fail is set", OVER), outcome
    elif spec.kind == "http":
        with socket.socket() as closed:  # a port nothing listens on
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        options = options | {"url": f"http://127.0.0.1:{port}/"}
        call = Call(1, 1, spec.id, slot, options, controls.lease, controls.timeout, kind="http")
        assert isinstance(HttpInvoker(parse_allow("127.0.0.1")).invoke(call), Outcome)


def outcome(build: Any) -> JobSpec | SpecError:
    try:
        return build()
    except SpecError as err:
        return err


FIELDS = [(kind, path) for kind in BASE for path in COMMON + OPTIONS[kind]]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_every_value_of_every_field_is_refused_by_name_or_runs(field: tuple[str, str], value: Any):
    kind, path = field
    result = outcome(lambda: JobSpec.from_dict("p", with_value(kind, path, value)))
    if isinstance(result, SpecError):
        assert names_the_field(result, path), (path, value, str(result))
    else:
        check_runs(result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_a_job_file_gives_the_same_answer_as_the_python_api(
    tmp_path_factory: pytest.TempPathFactory, field: tuple[str, str], value: Any
):
    kind, path = field
    entry = with_value(kind, path, value)
    file = Path(tmp_path_factory.mktemp("spec")) / "jobs.yaml"
    # Not allow_unicode: PyYAML then writes some characters raw that it reads back as
    # others (NEL as a space), which would test PyYAML's dumper, not cronchain.
    file.write_text(yaml.safe_dump({"project": "p", "jobs": [entry]}))
    from_file = outcome(lambda: load_job_file(file))
    direct = outcome(lambda: JobSpec.from_dict("p", entry))
    if isinstance(direct, SpecError):
        assert isinstance(from_file, SpecError), (path, value)
        assert from_file.field == direct.field, (path, value, str(from_file))
    elif isinstance(from_file, SpecError):  # a file also checks its triggers' names
        assert (from_file.field, path) == ("triggers", "triggers"), (value, str(from_file))
        assert "in this file" in str(from_file)
    else:
        assert from_file.jobs == [direct]


def test_the_values_the_issue_found_are_refused_by_name():
    found = [
        ("noop", "noop.sleep", 1.0e300),
        ("http", "http.timeout", 1.0e300),
        ("noop", "noop.sleep", float("nan")),
        ("noop", "lease", float("inf")),
        ("noop", "misfire_grace", 1.0e20),
        ("noop", "retries.max_attempts", 10**30),
        ("http", "http.url", "http://user:pass@example.com/"),
    ]
    for kind, path, value in found:
        result = outcome(
            lambda k=kind, p=path, v=value: JobSpec.from_dict("p", with_value(k, p, v))
        )
        assert isinstance(result, SpecError) and result.field == path, (path, result)
