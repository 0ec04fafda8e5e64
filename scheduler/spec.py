"""Job specs: what a user declares, validated before anything reaches the database.

A spec is normalized (durations in seconds, defaults filled in) so that its revision, a
hash of the normalized form, changes only when the meaning of the job changes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from scheduler import controls as job_controls
from scheduler.errors import SpecError
from scheduler.timing.schedules import Schedule, parse_schedule, parse_seconds

KINDS = ("noop", "http", "celery")
MAX_SPEC_BYTES = 64 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


@dataclass(frozen=True, eq=True)
class JobSpec:
    """One job as declared: build it in Python or load it from a job file.

    ``JobSpec("demo", "ping", "every 5s", kind="noop")`` validates on construction and
    raises :class:`SpecError` naming the field, so an invalid job is never stored.
    """

    project: str
    name: str
    schedule: str
    timezone: str = "UTC"
    kind: str = "noop"
    options: Mapping[str, Any] = field(default_factory=dict)
    controls: Mapping[str, Any] = field(default_factory=dict)
    """``lease``, ``timeout``, ``retries``, ``overlap``, ``max_buffered``,
    ``max_concurrent``, ``triggers``, ``misfire``, ``misfire_grace``, ``catchup_limit``:
    see :mod:`scheduler.controls`."""

    def __post_init__(self) -> None:
        _check_name("project", self.project)
        _check_name("name", self.name)
        parse_schedule(self.schedule, self.timezone)
        if self.kind not in KINDS:
            raise SpecError("kind", f"unknown kind {self.kind!r}; use one of {', '.join(KINDS)}")
        object.__setattr__(self, "options", _OPTIONS[self.kind](dict(self.options or {})))
        unknown = set(self.controls or {}) - set(job_controls.KEYS)
        if unknown:
            raise SpecError(sorted(unknown)[0], "unknown field")
        object.__setattr__(self, "controls", job_controls.normalize(self.controls or {}))
        if {self.name, self.id} & set(self.controls.get("triggers", ())):
            raise SpecError("triggers", "a job cannot trigger itself")
        size = len(self.canonical_json())
        if size > MAX_SPEC_BYTES:
            raise SpecError(self.kind, f"the job is {size} bytes; the limit is {MAX_SPEC_BYTES}")

    @property
    def id(self) -> str:
        return f"{self.project}/{self.name}"

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.timezone)

    def normalized(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schedule": " ".join(self.schedule.split()),
            "timezone": self.timezone,
            self.kind: dict(self.options),
            **self.controls,
        }

    def canonical_json(self) -> str:
        return json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))

    @property
    def revision(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, project: str, data: Mapping[str, Any]) -> JobSpec:
        """Build a spec from a job file entry; errors name the job and the field."""
        where = f"job {data.get('name')!r}" if isinstance(data, Mapping) else "job"
        try:
            return cls._from_dict(project, data)
        except SpecError as err:
            raise err.located(where) from None

    @classmethod
    def _from_dict(cls, project: str, data: Mapping[str, Any]) -> JobSpec:
        if not isinstance(data, Mapping):
            raise SpecError("jobs", "each job must be a mapping")
        unknown = set(data) - {"name", "schedule", "timezone", *KINDS, *job_controls.KEYS}
        if unknown:
            raise SpecError(sorted(unknown)[0], "unknown field")
        kinds = [k for k in KINDS if k in data]
        if len(kinds) != 1:
            found = " and ".join(kinds) if kinds else "none"
            raise SpecError("kind", f"exactly one of {', '.join(KINDS)} is required ({found})")
        for key in ("name", "schedule"):
            if not isinstance(data.get(key), str):
                raise SpecError(key, "is required and must be a string")
        return cls(
            project=project,
            name=data["name"],
            schedule=data["schedule"],
            timezone=str(data.get("timezone", "UTC")),
            kind=kinds[0],
            options=_as_mapping(kinds[0], data[kinds[0]]),
            controls={k: data[k] for k in job_controls.KEYS if k in data},
        )


@dataclass(frozen=True)
class JobFile:
    project: str
    jobs: list[JobSpec]


def load_job_file(path: str | Path) -> JobFile:
    """Read and validate a whole job file; the first error names the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SpecError("file", err.strerror or str(err), where=str(path)) from None
    except yaml.YAMLError as err:
        raise SpecError("file", f"not valid YAML: {err}", where=str(path)) from None
    try:
        return parse_job_file(data)
    except SpecError as err:
        where = f"{path}: {err.where}" if err.where else str(path)
        raise err.located(where) from None


def parse_job_file(data: Any) -> JobFile:
    if not isinstance(data, Mapping):
        raise SpecError("project", "a job file is a mapping with 'project' and 'jobs'")
    unknown = set(data) - {"project", "jobs"}
    if unknown:
        raise SpecError(sorted(unknown)[0], "unknown field")
    project = data.get("project")
    if not isinstance(project, str):
        raise SpecError("project", "is required and must be a string")
    entries = data.get("jobs") or []
    if not isinstance(entries, list):
        raise SpecError("jobs", "must be a list")
    jobs = [JobSpec.from_dict(project, entry) for entry in entries]
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise SpecError("name", "duplicate name", where=f"job {job.name!r}")
        seen.add(job.name)
    for job in jobs:
        for target in job.controls.get("triggers", ()):
            if "/" not in target and target not in seen:
                why = f"no job named {target!r} in this file (use project/name for another)"
                raise SpecError("triggers", why, where=f"job {job.name!r}")
    return JobFile(project, jobs)


# --- per kind options ------------------------------------------------------------------


def _check_name(what: str, value: Any) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise SpecError(what, f"{value!r} must be 1-100 letters, digits, '.', '_' or '-' (no '/')")


def _as_mapping(kind: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(kind, "must be a mapping")
    return value


def _reject_unknown(kind: str, options: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = set(options) - allowed
    if unknown:
        raise SpecError(f"{kind}.{sorted(unknown)[0]}", "unknown field")


def _noop_options(options: dict[str, Any]) -> dict[str, Any]:
    _reject_unknown("noop", options, {"sleep", "fail"})
    fail = options.get("fail", False)
    if not isinstance(fail, bool):
        raise SpecError("noop.fail", "must be true or false")
    return {"sleep": parse_seconds(options.get("sleep", 0), "noop.sleep"), "fail": fail}


def _http_options(options: dict[str, Any]) -> dict[str, Any]:
    allowed = {"url", "method", "timeout", "headers", "body", "accept", "max_redirects"}
    _reject_unknown("http", options, allowed)
    url = options.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError("http.url", f"{url!r} is not an http(s) URL")
    method = str(options.get("method", "GET")).upper()
    if method not in _HTTP_METHODS:
        raise SpecError("http.method", f"{method!r} is not one of {', '.join(_HTTP_METHODS)}")
    body = options.get("body")
    if body is not None and not isinstance(body, str):
        raise SpecError("http.body", "must be a string")
    out = {
        "url": url,
        "method": method,
        "timeout": parse_seconds(options.get("timeout", "10s"), "http.timeout"),
        "headers": _http_headers(options.get("headers") or {}),
        "body": body,
    }
    if "accept" in options:
        out["accept"] = _http_accept(options["accept"])
    if "max_redirects" in options:
        value = options["max_redirects"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20:
            raise SpecError("http.max_redirects", "must be a whole number from 0 to 20")
        out["max_redirects"] = value
    return out


def _http_headers(headers: Any) -> dict[str, Any]:
    """Values are strings, or ``{secret: VALUE}`` / ``{env: NAME}`` for values that must
    never appear in history or logs (``env`` is read by the worker at call time, so the
    value is not even stored)."""
    if not isinstance(headers, Mapping):
        raise SpecError("http.headers", "must map header names to values")
    out: dict[str, Any] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise SpecError("http.headers", f"{name!r} is not a header name")
        if isinstance(value, Mapping) and len(value) == 1 and set(value) <= {"secret", "env"}:
            ((key, inner),) = value.items()
            if isinstance(inner, str) and inner:
                out[name] = {key: inner}
                continue
        if not isinstance(value, str):
            raise SpecError(
                f"http.headers.{name}", "must be a string, {secret: VALUE} or {env: NAME}"
            )
        out[name] = value
    for name, value in out.items():
        text = value if isinstance(value, str) else value.get("secret", "")
        if "\r" in text or "\n" in text:
            raise SpecError(f"http.headers.{name}", "must not contain line breaks")
    return out


def _http_accept(value: Any) -> list[int | str]:
    """Status codes that count as success: numbers, or classes like ``2xx``."""
    if not isinstance(value, list) or not value:
        raise SpecError("http.accept", "must be a list of status codes, like [200, 204, '3xx']")
    for code in value:
        number = isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599
        if not number and not (isinstance(code, str) and re.fullmatch(r"[1-5]xx", code)):
            raise SpecError("http.accept", f"{code!r} is not a status code or a class like 2xx")
    return list(value)


def _celery_options(options: dict[str, Any]) -> dict[str, Any]:
    _reject_unknown("celery", options, {"task", "queue", "args", "kwargs"})
    task = options.get("task")
    if not isinstance(task, str) or not task:
        raise SpecError("celery.task", "is required: the name of a Celery task")
    queue = options.get("queue", "celery")
    if not isinstance(queue, str) or not queue:
        raise SpecError("celery.queue", "must be a queue name")
    args = options.get("args", [])
    if not isinstance(args, list):
        raise SpecError("celery.args", "must be a list")
    kwargs = options.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise SpecError("celery.kwargs", "must be a mapping with string keys")
    try:
        json.dumps([args, kwargs])
    except (TypeError, ValueError):
        raise SpecError("celery.args", "arguments must be JSON values") from None
    return {"task": task, "queue": queue, "args": list(args), "kwargs": dict(kwargs)}


_OPTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "noop": _noop_options,
    "http": _http_options,
    "celery": _celery_options,
}
