"""How cronchain runs a job's invocations, whatever their kind: lease, timeout, retries,
overlap and misfire policies, and the jobs triggered on success.

In a job file these are top-level keys of a job. Only values that differ from the
defaults are kept in the normalized spec, so that adding a control to cronchain does
not change the revision of every existing job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from scheduler.errors import SpecError
from scheduler.timing.schedules import parse_seconds
from statemachine import Misfire, MisfirePolicy, Overlap, OverlapPolicy, RetryPolicy

if TYPE_CHECKING:
    from scheduler.storage.rows import JobRow

E = TypeVar("E", bound=StrEnum)
KEYS = (
    "schedule_to_start",
    "lease",
    "timeout",
    "retries",
    "overlap",
    "max_buffered",
    "max_concurrent",
    "triggers",
    "misfire",
    "misfire_grace",
    "catchup_limit",
)
DEFAULT_LEASE = 60.0
# Long enough that a worker outage of minutes, or a deep queue, never fails a run.
DEFAULT_SCHEDULE_TO_START = 3600.0
MIN_LEASE = 1.0
_RETRY_DEFAULTS: dict[str, Any] = {
    "max_attempts": 1,
    "backoff": 10.0,
    "max_backoff": 600.0,
    "jitter": 0.1,
}


@dataclass(frozen=True)
class Controls:
    """The three timeouts, after Temporal's: ``schedule_to_start`` (how long an attempt
    may wait for a worker to claim it), ``timeout`` (how long it may run once claimed)
    and ``lease`` (the heartbeat lease while it runs, from the claim)."""

    schedule_to_start: timedelta = timedelta(seconds=DEFAULT_SCHEDULE_TO_START)
    lease: timedelta = timedelta(seconds=DEFAULT_LEASE)
    timeout: timedelta | None = None
    retry: RetryPolicy = RetryPolicy()
    overlap: OverlapPolicy = OverlapPolicy()
    triggers: tuple[str, ...] = ()
    misfire: MisfirePolicy = MisfirePolicy()

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Controls:
        """The controls of a normalized spec (as stored in ``jobs.spec``)."""
        retries = {**_RETRY_DEFAULTS, **spec.get("retries", {})}
        timeout = spec.get("timeout")
        grace = spec.get("misfire_grace")
        return cls(
            schedule_to_start=timedelta(
                seconds=spec.get("schedule_to_start", DEFAULT_SCHEDULE_TO_START)
            ),
            lease=timedelta(seconds=spec.get("lease", DEFAULT_LEASE)),
            timeout=None if timeout is None else timedelta(seconds=timeout),
            retry=RetryPolicy(
                max_attempts=retries["max_attempts"],
                backoff=timedelta(seconds=retries["backoff"]),
                max_backoff=timedelta(seconds=retries["max_backoff"]),
                jitter=retries["jitter"],
            ),
            overlap=OverlapPolicy(
                Overlap(spec.get("overlap", Overlap.SKIP.value)),
                max_buffered=spec.get("max_buffered", OverlapPolicy.max_buffered),
                max_concurrent=spec.get("max_concurrent", OverlapPolicy.max_concurrent),
            ),
            triggers=tuple(spec.get("triggers", ())),
            misfire=MisfirePolicy(
                Misfire(spec.get("misfire", Misfire.LATEST.value)),
                grace=None if grace is None else timedelta(seconds=grace),
                catchup_limit=spec.get("catchup_limit", MisfirePolicy.catchup_limit),
            ),
        )


_CONTROLS: dict[str, Controls] = {}


def controls_of(job: JobRow) -> Controls:
    """A job's controls, parsed once per revision (a hash of the spec that holds them)."""
    controls = _CONTROLS.get(job.revision)
    if controls is None:
        if len(_CONTROLS) > 8192:
            _CONTROLS.clear()
        controls = _CONTROLS[job.revision] = Controls.of(job.spec)
    return controls


def normalize(data: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the control keys of a job entry; keep those that are not defaults."""
    out: dict[str, Any] = _timeouts(data)
    if data.get("retries") is not None:
        retries = _retries(data["retries"])
        if retries:
            out["retries"] = retries
    out |= _overlap(data)
    out |= _misfire(data)
    if data.get("triggers"):
        out["triggers"] = _triggers(data["triggers"])
    return out


def _timeouts(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if data.get("schedule_to_start") is not None:
        wait = parse_seconds(data["schedule_to_start"], "schedule_to_start")
        if wait < MIN_LEASE:
            raise SpecError("schedule_to_start", f"must be at least {MIN_LEASE:g}s")
        if wait != DEFAULT_SCHEDULE_TO_START:
            out["schedule_to_start"] = wait
    if "lease" in data:
        lease = parse_seconds(data["lease"], "lease")
        if lease < MIN_LEASE:
            raise SpecError("lease", f"must be at least {MIN_LEASE:g}s")
        if lease != DEFAULT_LEASE:
            out["lease"] = lease
    if data.get("timeout") is not None:
        timeout = parse_seconds(data["timeout"], "timeout")
        if timeout <= 0:
            raise SpecError("timeout", "must be longer than 0s")
        out["timeout"] = timeout
    return out


def _count(key: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SpecError(key, f"must be a whole number of at least {least}")
    return value


def _retries(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(
            "retries", "must be a mapping: {max_attempts, backoff, max_backoff, jitter}"
        )
    unknown = set(value) - set(_RETRY_DEFAULTS)
    if unknown:
        raise SpecError(f"retries.{sorted(unknown)[0]}", "unknown field")
    retries = dict(_RETRY_DEFAULTS)
    if "max_attempts" in value:
        retries["max_attempts"] = _count("retries.max_attempts", value["max_attempts"], 1)
    for key in ("backoff", "max_backoff"):
        if key in value:
            retries[key] = parse_seconds(value[key], f"retries.{key}")
    if "jitter" in value:
        jitter = value["jitter"]
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise SpecError("retries.jitter", "must be a fraction between 0 and 1")
        retries["jitter"] = float(jitter)
    if retries["max_backoff"] < retries["backoff"]:
        raise SpecError("retries.max_backoff", "must not be shorter than backoff")
    return {k: v for k, v in retries.items() if v != _RETRY_DEFAULTS[k]}


def _choice(key: str, data: Mapping[str, Any], default: E) -> E:
    """One of an enum's values, named in the error if it is not."""
    value = data.get(key, default.value)
    try:
        return type(default)(value)
    except ValueError:
        choices = ", ".join(e.value for e in type(default))
        raise SpecError(key, f"{value!r} is not one of {choices}") from None


def _overlap(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mode = _choice("overlap", data, Overlap.SKIP)
    if mode is not Overlap.SKIP:
        out["overlap"] = mode.value
    for key, needs in (("max_buffered", Overlap.BUFFER_ALL), ("max_concurrent", Overlap.ALLOW)):
        if key in data:
            if mode is not needs:
                raise SpecError(key, f"only applies with overlap: {needs.value}")
            value = _count(key, data[key], 1)
            if value != getattr(OverlapPolicy, key):
                out[key] = value
    return out


def _misfire(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mode = _choice("misfire", data, Misfire.LATEST)
    if mode is not Misfire.LATEST:
        out["misfire"] = mode.value
    if data.get("misfire_grace") is not None:
        out["misfire_grace"] = parse_seconds(data["misfire_grace"], "misfire_grace")
    if "catchup_limit" in data:
        if mode is not Misfire.ALL:
            raise SpecError("catchup_limit", "only applies with misfire: all")
        limit = _count("catchup_limit", data["catchup_limit"], 1)
        if limit != MisfirePolicy.catchup_limit:
            out["catchup_limit"] = limit
    return out


def _triggers(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError("triggers", "must be a list of job names (name or project/name)")
    return sorted(set(value))
