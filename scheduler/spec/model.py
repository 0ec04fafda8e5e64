"""The job spec's grammar as pydantic models: every field, its type and its range.

A job file entry is one of three models, told apart by the key that names its kind
(``noop:``, ``http:`` or ``celery:``): a discriminated union, so that an error names the
kind's own fields. Every model forbids unknown keys, every number is finite and within a
stated range, and nothing is coerced (``"5"`` is not a count, ``true`` is not a number), so
a value that is stored is one that every run can use.

:func:`validate_entry` turns pydantic's errors into a :class:`SpecError` naming the field;
:mod:`scheduler.spec.jobspec` builds the normalized form (whose hash is the revision) from the
model, field for field as before, so that no existing job changes revision.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.timing.schedules import parse_schedule, parse_seconds, parse_zone

# A job's priority when it names none: the middle of Celery's 0-9 on Redis.
DEFAULT_PRIORITY = 5

KINDS = ("noop", "http", "celery")
# Every duration is at most this: long enough for any real lease, wait or backoff (and a
# yearly job's misfire grace), short enough that adding it to a time near the present
# never overflows.
MAX_DURATION = timedelta(days=366)
MIN_LEASE = 1.0
MAX_TRIGGERS = 100
MAX_REQUIRES = 20
MAX_URL = 8192  # signed webhook URLs run long; the whole job is at most 64 KiB
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # what HTTP/1.1 carries as it is
_URL = re.compile(r"[\x21-\x7e]+")
_NETLOC = re.compile(r"[^\s\x00-\x1f\x7f/?#@]+")  # no user:password@, checked first
_STATUS_CLASS = re.compile(r"[1-5]xx")


def _seconds(value: object) -> float:
    """A duration: seconds as a number, or text like ``1h30m``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("must be a duration like 10s, 5m or 1h30m")
    try:
        return parse_seconds(value, "")
    except SpecError as err:
        raise ValueError(err.reason) from None


def _duration(least: float = 0.0, *, above: bool = False) -> Any:
    """A duration of at least ``least`` seconds (more than, with ``above``), at most
    :data:`MAX_DURATION`."""
    most = MAX_DURATION.total_seconds()

    def check(seconds: float) -> float:
        if seconds > most or seconds < least or (above and seconds == least):
            low = f"longer than {least:g}s and " if above else f"at least {least:g}s and "
            raise ValueError(f"must be {low if least or above else ''}at most 366d")
        return seconds

    return Annotated[float, BeforeValidator(_seconds), AfterValidator(check)]


def _count(least: int, most: int) -> Any:
    def check(value: int) -> int:
        if not least <= value <= most:
            raise ValueError(f"must be a whole number from {least} to {most}")
        return value

    return Annotated[int, AfterValidator(check)]


def _fraction(value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError("must be a fraction between 0 and 1")
    return value


def _name(value: str) -> str:
    if not NAME.fullmatch(value):
        raise ValueError(f"{value!r} must be 1-100 letters, digits, '.', '_' or '-' (no '/')")
    return value


def _job_ref(value: str) -> str:
    project, slash, name = value.rpartition("/")
    if not NAME.fullmatch(name) or (slash and not NAME.fullmatch(project)):
        raise ValueError(f"{value!r} is not a job name (name or project/name)")
    return value


Name = Annotated[str, AfterValidator(_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _any_mapping(cls, data: Any) -> Any:
        """Strict mode takes a dict only; the Python API may hand any mapping."""
        return dict(data) if isinstance(data, Mapping) and not isinstance(data, dict) else data


def _mapping_or_empty(value: Any) -> Any:
    return {} if value is None else value


def _empty_as_none(value: Any) -> Any:
    """``headers: []`` or ``triggers: ""``: nothing, as cronchain has always read them."""
    if isinstance(value, str | list | dict) and not value:
        return None
    return dict(value) if isinstance(value, Mapping) else value


def _empty_as_empty_mapping(value: Any) -> Any:
    """``kwargs: {}``, ``[]`` or ``null``: no keyword arguments."""
    empty = value is None or (isinstance(value, str | list | dict) and not value)
    return {} if empty else _empty_as_none(value)


# --- the kinds --------------------------------------------------------------------------


class NoopOptions(_Strict):
    sleep: _duration() = 0.0  # type: ignore[valid-type]
    fail: bool = False

    def normalized(self) -> dict[str, Any]:
        return {"sleep": self.sleep, "fail": self.fail}


Secret = Annotated[
    dict[Literal["secret", "env"], Annotated[str, Field(min_length=1)]],
    Field(min_length=1, max_length=1),
]


def _http_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "must not hold credentials (user:password@): send them in a header "
            "with {secret: ...} or {env: NAME}, which history never shows"
        )
    try:
        port = parts.port  # raises for a port out of range
        parts.hostname.encode("idna")  # an international name, as HTTP will send it
    except (ValueError, UnicodeError):
        port = 0
    if port == 0 or not _NETLOC.fullmatch(parts.netloc):
        raise ValueError(f"{url!r} has no valid host and port")
    if not _URL.fullmatch(parts._replace(netloc="host").geturl()):
        raise ValueError("must be printable ASCII without spaces: percent-encode the path")
    return url


def _http_headers(headers: Any, field: str) -> Any:
    if not isinstance(headers, Mapping):
        return headers  # pydantic says it must be a mapping
    for name, value in sorted(headers.items(), key=lambda item: str(item[0])):
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a header name")
        text = value if isinstance(value, str) else ""
        if isinstance(value, Mapping) and isinstance(value.get("secret"), str):
            text = value["secret"]
        if "\r" in text or "\n" in text:
            raise SpecError(f"{field}.{name}", "must not contain line breaks")
        if not _HEADER_VALUE.fullmatch(text):
            raise SpecError(f"{field}.{name}", "must be printable ASCII text")
    return headers


class HttpOptions(_Strict):
    url: Annotated[str, Field(max_length=MAX_URL)]
    method: str = "GET"
    timeout: _duration(0.0, above=True) = 10.0  # type: ignore[valid-type]
    headers: Annotated[dict[str, str | Secret] | None, BeforeValidator(_empty_as_none)] = None
    body: str | None = None
    accept: Annotated[list[int | str], Field(min_length=1)] | None = None
    max_redirects: _count(0, 20) | None = None  # type: ignore[valid-type]

    _url = field_validator("url")(staticmethod(_http_url))

    @field_validator("method")
    @classmethod
    def _method(cls, method: str) -> str:
        if method.upper() not in HTTP_METHODS:
            raise ValueError(f"{method!r} is not one of {', '.join(HTTP_METHODS)}")
        return method.upper()

    _headers = field_validator("headers", mode="before")(
        staticmethod(lambda headers: _http_headers(headers, "http.headers"))
    )

    @field_validator("accept")
    @classmethod
    def _accept(cls, codes: list[int | str] | None) -> list[int | str] | None:
        for code in codes or ():
            number = isinstance(code, int) and 100 <= code <= 599
            if not number and not (isinstance(code, str) and _STATUS_CLASS.fullmatch(code)):
                raise ValueError(f"{code!r} is not a status code or a class like 2xx")
        return codes

    def normalized(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "method": self.method,
            "timeout": self.timeout,
            "headers": dict(self.headers or {}),
            "body": self.body,
        }
        if self.accept is not None:
            out["accept"] = list(self.accept)
        if self.max_redirects is not None:
            out["max_redirects"] = self.max_redirects
        return out


def _json_values(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError("must hold JSON values only (finite numbers, no dates)") from None
    return value


class CeleryOptions(_Strict):
    task: Annotated[str, Field(min_length=1, max_length=255)]
    queue: Annotated[str, Field(min_length=1, max_length=255)] = "celery"
    args: list[Any] = []
    kwargs: Annotated[dict[str, Any], BeforeValidator(_empty_as_empty_mapping)] = {}
    priority: _count(0, 255) | None = None  # type: ignore[valid-type]
    expires: _duration(0.0, above=True) | None = None  # type: ignore[valid-type]

    _json = field_validator("args", "kwargs")(staticmethod(_json_values))

    def normalized(self) -> dict[str, Any]:
        out = {"task": self.task, "queue": self.queue, "args": self.args, "kwargs": self.kwargs}
        for key in ("priority", "expires"):  # kept only when given: no revision changes
            if (value := getattr(self, key)) is not None:
                out[key] = value
        return out


# --- the controls ----------------------------------------------------------------------

RETRY_DEFAULTS: dict[str, Any] = {
    "max_attempts": 1,
    "backoff": 10.0,
    "max_backoff": 600.0,
    "jitter": 0.1,
}


class Retries(_Strict):
    max_attempts: _count(1, 100) = 1  # type: ignore[valid-type]
    backoff: _duration() = 10.0  # type: ignore[valid-type]
    max_backoff: _duration() = 600.0  # type: ignore[valid-type]
    jitter: Annotated[float, AfterValidator(_fraction)] = 0.1

    @model_validator(mode="after")
    def _ordered(self) -> Retries:
        if self.max_backoff < self.backoff:
            raise SpecError("retries.max_backoff", "must not be shorter than backoff")
        return self

    def normalized(self) -> dict[str, Any]:
        values = self.model_dump()
        return {k: v for k, v in values.items() if v != RETRY_DEFAULTS[k]}


# What raises an alert (``scheduler.alerts.rules`` says when each is raised); the two
# with a threshold are written ``late_start>2m``.
ALERT_EVENTS = ("failed", "retries_exhausted", "skipped", "recovered", "upstream_stale")
ALERT_THRESHOLDS = ("late_start", "running_longer")
MAX_CHANNELS = 20


def _alert_event(value: str) -> str:
    """An event in its stored form: thresholds in seconds (``late_start>120s``)."""
    name, gt, threshold = value.partition(">")
    name = name.strip()
    if name in ALERT_THRESHOLDS:
        if not gt:
            raise ValueError(f"{name} needs a threshold, like {name}>5m")
        seconds = _seconds(threshold.strip())
        if not 0 < seconds <= MAX_DURATION.total_seconds():
            raise ValueError(f"{value!r}: the threshold must be more than 0s and at most 366d")
        return f"{name}>{seconds:g}s"
    if name in ALERT_EVENTS and not gt:
        return name
    known = ", ".join([*ALERT_EVENTS, *(f"{t}>DURATION" for t in ALERT_THRESHOLDS)])
    raise ValueError(f"{value!r} is not one of {known}")


class Alerts(_Strict):
    """``alerts: {on: [...], to: [...]}``: the events of a job's slots that are sent,
    and the channels (declared under ``channels:``) that they are sent to."""

    on: Annotated[
        list[Annotated[str, AfterValidator(_alert_event)]], Field(min_length=1, max_length=10)
    ]
    to: Annotated[list[Name], Field(min_length=1, max_length=MAX_CHANNELS)]

    @model_validator(mode="after")
    def _paired(self) -> Alerts:
        if "recovered" in self.on and not {"failed", "retries_exhausted"} & set(self.on):
            raise SpecError("alerts.on", "recovered follows failed or retries_exhausted: add one")
        return self

    def normalized(self) -> dict[str, Any]:
        return {"on": sorted(set(self.on)), "to": sorted(set(self.to))}


class Requirement(_Strict):
    """One upstream of ``requires``: a job (``name``, or ``project/name``) that must have
    succeeded within ``succeeded_within`` before the slot (``scheduler.workflows.upstream``)."""

    job: Annotated[str, AfterValidator(_job_ref)]
    succeeded_within: _duration(0.0, above=True)  # type: ignore[valid-type]

    def normalized(self) -> dict[str, Any]:
        return {"job": self.job, "succeeded_within": self.succeeded_within}


MAX_GATES = 10
DEFAULT_GATE_EVERY = 60.0


class GateHttp(_Strict):
    """An ``http`` gate: a GET that says yes with a 2xx answer within ``timeout``
    (default: 10s, or the gate's ``every`` if shorter)."""

    url: Annotated[str, Field(max_length=MAX_URL)]
    timeout: _duration(0.0, above=True) | None = None  # type: ignore[valid-type]
    headers: Annotated[dict[str, str | Secret] | None, BeforeValidator(_empty_as_none)] = None

    _url = field_validator("url")(staticmethod(_http_url))
    _headers = field_validator("headers", mode="before")(
        staticmethod(lambda headers: _http_headers(headers, "gates.http.headers"))
    )

    def normalized(self, every: float) -> dict[str, Any]:
        timeout = min(10.0, every) if self.timeout is None else self.timeout
        return {"url": self.url, "timeout": timeout, "headers": dict(self.headers or {})}


class GateCelery(_Strict):
    """A ``celery`` gate: a task on the user's workers that says yes by returning True."""

    task: Annotated[str, Field(min_length=1, max_length=255)]
    queue: Annotated[str, Field(min_length=1, max_length=255)] = "celery"
    args: list[Any] = []
    kwargs: Annotated[dict[str, Any], BeforeValidator(_empty_as_empty_mapping)] = {}

    _json = field_validator("args", "kwargs")(staticmethod(_json_values))

    def normalized(self) -> dict[str, Any]:
        return {"task": self.task, "queue": self.queue, "args": self.args, "kwargs": self.kwargs}


def _gate_target(value: Any, key: str) -> Any:
    """``http: URL`` and ``celery: TASK`` are short for ``{url: URL}``, ``{task: TASK}``."""
    return {key: value} if isinstance(value, str) else value


class Gate(_Strict):
    """One readiness check of ``gates`` (``scheduler.workflows.gates``): exactly one of ``http``
    and ``celery``, asked every ``every`` while the slot waits."""

    name: Name | None = None
    http: Annotated[GateHttp, BeforeValidator(lambda v: _gate_target(v, "url"))] | None = None
    celery: Annotated[GateCelery, BeforeValidator(lambda v: _gate_target(v, "task"))] | None = None
    every: _duration(1.0) = DEFAULT_GATE_EVERY  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _one_kind(self) -> Gate:
        if (self.http is None) == (self.celery is None):
            raise SpecError("gates", "each gate is exactly one of http: or celery:")
        timeout = self.http.timeout if self.http is not None else None
        if timeout is not None and timeout > self.every:
            raise SpecError("gates.http.timeout", "must not be longer than the gate's every")
        return self

    @property
    def label(self) -> str:
        """Its name, else what it asks: the URL's host, or the task."""
        if self.name is not None:
            return self.name
        if self.http is not None:
            return urlsplit(self.http.url).hostname or "http"
        assert self.celery is not None
        return self.celery.task

    def normalized(self) -> dict[str, Any]:
        if self.http is not None:
            return {
                "name": self.label,
                "http": self.http.normalized(self.every),
                "every": self.every,
            }
        assert self.celery is not None
        return {"name": self.label, "celery": self.celery.normalized(), "every": self.every}


Overlap = Literal["skip", "buffer_one", "buffer_all", "allow", "cancel_other"]
Misfire = Literal["skip", "latest", "all"]
OnUnmet = Literal["skip", "fail", "run"]
Days = Literal["either", "both"]  # which of a cron schedule's two day fields must match


class JobFields(_Strict):
    """What every kind shares: the name, the schedule and the controls."""

    name: Name
    schedule: str
    timezone: str = "UTC"
    days: Days | None = None
    schedule_to_start: _duration(MIN_LEASE) | None = None  # type: ignore[valid-type]
    lease: _duration(MIN_LEASE) | None = None  # type: ignore[valid-type]
    timeout: _duration(0.0, above=True) | None = None  # type: ignore[valid-type]
    retries: Retries | None = None
    overlap: Overlap | None = None
    max_buffered: _count(1, 10_000) | None = None  # type: ignore[valid-type]
    max_concurrent: _count(1, 1_000) | None = None  # type: ignore[valid-type]
    triggers: Annotated[
        Annotated[list[Annotated[str, AfterValidator(_job_ref)]], Field(max_length=MAX_TRIGGERS)]
        | None,
        BeforeValidator(_empty_as_none),
    ] = None
    misfire: Misfire | None = None
    misfire_grace: _duration() | None = None  # type: ignore[valid-type]
    catchup_limit: _count(1, 10_000) | None = None  # type: ignore[valid-type]
    # Declared paused: true, or the reason (an import keeps a task disabled in its source).
    paused: Annotated[str, Field(min_length=1, max_length=500)] | bool | None = None
    alerts: Alerts | None = None
    priority: _count(0, 9) | None = None  # type: ignore[valid-type]
    requires: Annotated[
        Annotated[list[Requirement], Field(max_length=MAX_REQUIRES)] | None,
        BeforeValidator(_empty_as_none),
    ] = None
    gates: Annotated[
        Annotated[list[Gate], Field(max_length=MAX_GATES)] | None,
        BeforeValidator(_empty_as_none),
    ] = None
    max_wait: _duration() | None = None  # type: ignore[valid-type]
    on_unmet: OnUnmet | None = None
    pool: Name | None = None

    @field_validator("timezone")
    @classmethod
    def _zone(cls, name: str) -> str:
        parse_zone(name)
        return name

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> JobFields:
        schedule = parse_schedule(self.schedule, self.timezone, days=self.days)
        if isinstance(info.context, dict):  # for the caller (see validate_entry)
            info.context["schedule"] = schedule
        needs = {"max_buffered": "buffer_all", "max_concurrent": "allow"}
        for key, mode in needs.items():
            if getattr(self, key) is not None and (self.overlap or "skip") != mode:
                raise SpecError(key, f"only applies with overlap: {mode}")
        for key in ("max_wait", "on_unmet"):
            if getattr(self, key) is not None and not (self.requires or self.gates):
                raise SpecError(key, "only applies with requires or gates")
        upstreams = [r.job for r in self.requires or ()]
        twice = sorted({ref for ref in upstreams if upstreams.count(ref) > 1})
        if twice:
            raise SpecError("requires", f"{twice[0]!r} is listed twice")
        labels = [g.label for g in self.gates or ()]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise SpecError("gates", f"two gates are named {twice[0]!r}: give each a name")
        if self.catchup_limit is not None and self.misfire != "all":
            raise SpecError("catchup_limit", "only applies with misfire: all")
        if self.misfire == "skip" and self.misfire_grace is not None and self.misfire_grace < 1:
            why = "must be at least 1s with misfire: skip (every tick is a little late)"
            raise SpecError("misfire_grace", why)
        return self


class NoopJob(JobFields):
    noop: Annotated[NoopOptions, BeforeValidator(_mapping_or_empty)]


class HttpJob(JobFields):
    http: HttpOptions


class CeleryJob(JobFields):
    celery: CeleryOptions


def _kind_of(entry: Any) -> str | None:
    if isinstance(entry, Mapping):
        kinds = [k for k in KINDS if k in entry]
        return kinds[0] if len(kinds) == 1 else None
    return getattr(entry, "kind", None)


JobModel = NoopJob | HttpJob | CeleryJob
_ENTRY: TypeAdapter[JobModel] = TypeAdapter(
    Annotated[
        Annotated[NoopJob, Tag("noop")]
        | Annotated[HttpJob, Tag("http")]
        | Annotated[CeleryJob, Tag("celery")],
        Discriminator(_kind_of),
    ]
)


def kind_of(entry: Mapping[str, Any]) -> str:
    """The kind a job entry names by its one kind key."""
    kinds = [k for k in KINDS if k in entry]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "none"
        raise SpecError("kind", f"exactly one of {', '.join(KINDS)} is required ({found})")
    return kinds[0]


def validate_entry(entry: Mapping[str, Any], parsed: dict[str, Any] | None = None) -> JobModel:
    """Validate one job entry (a job file's mapping); the error names the first bad field.
    ``parsed["schedule"]`` is then the schedule as validation parsed it: apply steps each
    job on it, where a 100,000-job file had each one parsed twice."""
    kind_of(entry)
    try:
        return _ENTRY.validate_python(entry, context=parsed)
    except ValidationError as err:
        raise _spec_error(err) from None


# The members of a union, which pydantic names in an error's path: not a field.
_TYPE_TAG = re.compile(r"(int|str|float|bool|dict|list)(\[.*\])?$|function-")


def _where(error: Any) -> list[str]:
    """The path of a field as the user wrote it: the kind's tag and list indexes left
    out, and a key that is not a plain word quoted."""
    parts = [p for p in error["loc"][1:] if not isinstance(p, int)]
    if error["type"] != "extra_forbidden":  # there the last part is the key as written
        parts = [p for p in parts if not _TYPE_TAG.match(p)]
    return [p if re.fullmatch(r"[\w-]+", p) else repr(p) for p in parts]


_MESSAGES = {
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "extra_forbidden": "unknown field",
    "missing": "is required",
    "finite_number": "must be a finite number",
}


def _spec_error(err: ValidationError) -> SpecError:
    """The error to show: an unknown field first (a misspelt key explains the errors
    that follow from it), otherwise the first."""
    errors = err.errors(include_url=False)
    unknown = sorted((e for e in errors if e["type"] == "extra_forbidden"), key=_where)
    first = unknown[0] if unknown else errors[0]
    kind = first["type"]
    loc = _where(first)
    if loc[:2] == ["http", "headers"] and len(loc) > 3:  # neither a string nor a secret
        return SpecError(".".join(loc[:3]), "must be a string, {secret: VALUE} or {env: NAME}")
    field = ".".join(map(str, loc)) or "job"
    if kind == "value_error":
        return SpecError(field, str(first["ctx"]["error"]))
    if kind == "literal_error":
        choices = first["ctx"]["expected"].replace("'", "").replace(" or ", ", ")
        return SpecError(field, f"{first['input']!r} is not one of {choices}")
    missing = first["input"] is None and kind.endswith("_type")
    message = "is required" if missing else _MESSAGES.get(kind)
    if message is None:
        message = first["msg"][0].lower() + first["msg"][1:]
    return SpecError(field, message)
