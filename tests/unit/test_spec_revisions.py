"""Revisions pinned from the code before the spec became pydantic models (issue 14): an
upgrade of cronchain must not rewrite a job whose declaration did not change, so each of
these declarations keeps the revision it had."""

from __future__ import annotations

from typing import Any

import pytest

from cronchain.scheduler.spec.jobspec import JobSpec

CASES: list[tuple[str, dict[str, Any], str]] = [
    ("noop-default", {"schedule": "every 5s"}, "3b72696965498830"),
    (
        "noop-sleep",
        {"schedule": "*/5 * * * *", "kind": "noop", "options": {"sleep": "1.5s", "fail": True}},
        "5a63cda6f4716e69",
    ),
    ("tz-cron", {"schedule": "30 2 * * *", "timezone": "Europe/Berlin"}, "f81efa46edcaee62"),
    ("alias", {"schedule": "@hourly"}, "4efcac8e448d161f"),
    ("every-offset", {"schedule": "every 1h offset 10m"}, "5cfffa38ac918a2c"),
    ("delay", {"schedule": "with 10m interval"}, "78490e9b429de380"),
    ("triggered", {"schedule": "triggered"}, "df9cc27cfb44265a"),
    ("seconds-field", {"schedule": "0 */5 * * * 30"}, "ac82b071e00e939f"),
    (
        "http",
        {
            "schedule": "every 1m",
            "kind": "http",
            "options": {
                "url": "https://example.com/x",
                "method": "post",
                "timeout": "30s",
                "headers": {
                    "X-A": "b",
                    "Authorization": {"secret": "tok"},
                    "X-E": {"env": "TOKEN"},
                },
                "body": "{}",
                "accept": [200, "3xx"],
                "max_redirects": 3,
            },
        },
        "7caaeedc144a6c77",
    ),
    (
        "celery",
        {
            "schedule": "0 0 * * 1-5",
            "kind": "celery",
            "options": {
                "task": "etl.nightly",
                "queue": "etl",
                "args": [1, "a"],
                "kwargs": {"k": [1, 2]},
            },
        },
        "64c91918c5b387f8",
    ),
    (
        "controls",
        {
            "schedule": "every 10s",
            "controls": {
                "schedule_to_start": "5m",
                "lease": "2m",
                "timeout": "1h",
                "retries": {"max_attempts": 3, "backoff": "5s", "max_backoff": "1m", "jitter": 0.5},
                "overlap": "buffer_all",
                "max_buffered": 4,
                "triggers": ["other", "p2/x"],
                "misfire": "all",
                "misfire_grace": "30s",
                "catchup_limit": 7,
            },
        },
        "201b19aee3039ac8",
    ),
    (
        "controls-defaults",
        {
            "schedule": "every 10s",
            "controls": {
                "lease": 60,
                "schedule_to_start": "1h",
                "retries": {"max_attempts": 1},
                "overlap": "skip",
                "misfire": "latest",
            },
        },
        "bbaa0ede87d190bb",
    ),
    (
        "allow",
        {
            "schedule": "every 10s",
            "controls": {"overlap": "allow", "max_concurrent": 3, "misfire": "skip"},
        },
        "df69b1fd54eaaf3f",
    ),
    (
        "cancel-other",
        {"schedule": "every 10s", "controls": {"overlap": "cancel_other", "misfire_grace": 0}},
        "a9f354931de1c1e5",
    ),
]


@pytest.mark.parametrize(("name", "declared", "revision"), CASES, ids=[c[0] for c in CASES])
def test_revision_is_unchanged(name: str, declared: dict[str, Any], revision: str) -> None:
    assert JobSpec("proj", name, **declared).revision == revision


@pytest.mark.parametrize(("name", "declared", "revision"), CASES, ids=[c[0] for c in CASES])
def test_revision_from_a_job_file_entry_is_the_same(
    name: str, declared: dict[str, Any], revision: str
) -> None:
    entry = {"name": name, "schedule": declared["schedule"], **declared.get("controls", {})}
    entry[declared.get("kind", "noop")] = declared.get("options", {})
    if "timezone" in declared:
        entry["timezone"] = declared["timezone"]
    assert JobSpec.from_dict("proj", entry).revision == revision
