"""Job specs: what a user declares, validated before anything reaches the database.

A spec is normalized (durations in seconds, defaults filled in) so that its revision, a
hash of the normalized form, changes only when the meaning of the job changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronchain.scheduler import outside
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec import controls as job_controls
from cronchain.scheduler.spec.channels import from_env as channels_from_env
from cronchain.scheduler.spec.channels import validate_channels
from cronchain.scheduler.spec.model import KINDS, NAME, kind_of, validate_entry
from cronchain.scheduler.spec.yamlfile import read_yaml_file
from cronchain.scheduler.timing.schedules import Schedule, parse_schedule

MAX_SPEC_BYTES = 64 * 1024


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
    ``max_concurrent``, ``triggers``, ``misfire``, ``misfire_grace``, ``catchup_limit``,
    ``alerts``, ``priority``, ``requires``, ``max_wait``, ``on_unmet``: see
    :mod:`scheduler.spec.controls`."""
    days: str | None = None
    """``both``: a cron schedule's day of month and day of week must both match, as in
    Celery's ``crontab`` and Quartz (cron's rule, ``either``, is the default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.project, str) or not NAME.fullmatch(self.project):
            why = "must be 1-100 letters, digits, '.', '_' or '-' (no '/')"
            raise SpecError("project", f"{self.project!r} {why}")
        if self.kind not in KINDS:
            raise SpecError("kind", f"unknown kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if not isinstance(self.controls or {}, Mapping):
            raise SpecError("controls", "must be a mapping")
        unknown = set(self.controls or {}) - set(job_controls.KEYS)
        if unknown:
            raise SpecError(sorted(map(str, unknown))[0], "unknown field")
        entry = {
            **(self.controls or {}),
            "name": self.name,
            "schedule": self.schedule,
            "timezone": self.timezone,
            self.kind: self.options,
        }
        if self.days is not None:
            entry["days"] = self.days
        parsed: dict[str, Any] = {}
        model = validate_entry(entry, parsed)
        self.__dict__["_schedule"] = parsed["schedule"]  # for ``parsed_schedule``
        object.__setattr__(self, "options", getattr(model, self.kind).normalized())
        object.__setattr__(self, "controls", job_controls.normalized(model))
        object.__setattr__(self, "days", "both" if model.days == "both" else None)
        if {self.name, self.id} & set(self.controls.get("triggers", ())):
            raise SpecError("triggers", "a job cannot trigger itself")
        if {self.name, self.id} & {r["job"] for r in self.controls.get("requires", ())}:
            raise SpecError("requires", "a job cannot require itself")
        canonical = self.canonical_json()
        if "\\u0000" in canonical or "\\ud" in canonical:  # a NUL, a surrogate (or an emoji)
            _refuse_unstorable(entry)
        if len(canonical) > MAX_SPEC_BYTES:
            size = len(canonical)
            raise SpecError(self.kind, f"the job is {size} bytes; the limit is {MAX_SPEC_BYTES}")
        self.__dict__["revision"] = _revision(canonical)  # ``revision``, cached at once

    @property
    def id(self) -> str:
        return f"{self.project}/{self.name}"

    def parsed_schedule(self) -> Schedule:
        """The schedule, as validation parsed it: the same object each time."""
        parsed = self.__dict__.get("_schedule")
        if parsed is None:
            return parse_schedule(self.schedule, self.timezone, days=self.days)
        return parsed

    def normalized(self) -> dict[str, Any]:
        """The stored form; ``days`` only when it is ``both``, so that the revisions of
        the jobs written before it existed stay as they were."""
        days = {"days": self.days} if self.days else {}
        return {
            "name": self.name,
            "schedule": " ".join(self.schedule.split()),
            "timezone": self.timezone,
            **days,
            self.kind: dict(self.options),
            **self.controls,
        }

    def canonical_json(self) -> str:
        return json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))

    @functools.cached_property  # a spec is frozen; apply reads it several times a job
    def revision(self) -> str:
        return _revision(self.canonical_json())

    @classmethod
    def from_dict(cls, project: str, data: Mapping[str, Any]) -> JobSpec:
        """Build a spec from a job file entry; errors name the job and the field."""
        where = f"job {data.get('name')!r}" if isinstance(data, Mapping) else "job"
        try:
            if not isinstance(data, Mapping):
                raise SpecError("jobs", "each job must be a mapping")
            unknown = set(data) - {"name", *job_controls.WHEN, *KINDS, *job_controls.KEYS}
            if unknown:
                raise SpecError(sorted(map(str, unknown))[0], "unknown field")
            kind = kind_of(data)
            return cls(
                project=project,
                name=data.get("name"),  # type: ignore[arg-type]
                schedule=data.get("schedule"),  # type: ignore[arg-type]
                timezone=data.get("timezone", "UTC"),
                kind=kind,
                options=data[kind],
                controls={k: data[k] for k in job_controls.KEYS if k in data},
                days=data.get("days"),
            )
        except SpecError as err:
            raise err.located(where) from None


def _refuse_unstorable(entry: Mapping[str, Any]) -> None:
    """A declared value is stored as it was written, or refused: no database stores a
    NUL or a lone surrogate (text from outside is made storable instead: ``outside``)."""
    path = outside.unstorable(entry)
    if path is not None:
        raise SpecError(".".join(path), outside.UNSTORABLE_WHY)


def _revision(canonical_json: str) -> str:
    return hashlib.sha256(canonical_json.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobFile:
    """A job file: its project, its jobs, the alert channels it declares (None: the
    file has no ``channels:``, and apply leaves the project's as they are) and the
    sizes of the pools it declares (``pools: {gpu: 4}``; pools are shared by every
    project, and a file sets the sizes of those it names)."""

    project: str
    jobs: list[JobSpec]
    channels: dict[str, dict[str, Any]] | None = None
    pools: dict[str, int] | None = None


def load_job_file(path: str | Path) -> JobFile:
    """Read and validate a whole job file; the first error names the file."""
    path = Path(path)
    data = read_yaml_file(path)  # bounded before anything is expanded
    try:
        return parse_job_file(data)
    except SpecError as err:
        where = f"{path}: {err.where}" if err.where else str(path)
        raise err.located(where) from None


def parse_job_file(data: Any) -> JobFile:
    if not isinstance(data, Mapping):
        raise SpecError("project", "a job file is a mapping with 'project' and 'jobs'")
    unknown = set(data) - {"project", "jobs", "channels", "alerts", "pools"}
    if unknown:
        raise SpecError(sorted(map(str, unknown))[0], "unknown field")
    project = data.get("project")
    if not isinstance(project, str):
        raise SpecError("project", "is required and must be a string")
    entries = data.get("jobs") or []
    if not isinstance(entries, list):
        raise SpecError("jobs", "must be a list")
    unstorable = outside.unstorable(data.get("channels"), ("channels",))
    if unstorable is not None:
        raise SpecError(".".join(unstorable), outside.UNSTORABLE_WHY)
    channels = None if data.get("channels") is None else validate_channels(data["channels"])
    if "alerts" in data:  # the project's default: a job's own alerts (even null) win
        entries = [_with_default(entry, data["alerts"]) for entry in entries]
    jobs = [JobSpec.from_dict(project, entry) for entry in entries]
    _refuse_unknown_channels(jobs, channels)
    _refuse_unknown_names(jobs)
    pools = None if data.get("pools") is None else validate_pools(data["pools"])
    return JobFile(project, jobs, channels, pools)


MAX_POOL_SIZE = 10_000


def validate_pools(pools: Any) -> dict[str, int]:
    """``pools: {NAME: SIZE}``: sizes are whole numbers of places, 0 holding every run."""
    if not isinstance(pools, Mapping):
        raise SpecError("pools", "must be a mapping of pool names to sizes, like {gpu: 4}")
    for name, size in pools.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise SpecError("pools", f"{name!r} must be 1-100 letters, digits, '.', '_' or '-'")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_POOL_SIZE:
            raise SpecError(f"pools.{name}", f"must be a whole number from 0 to {MAX_POOL_SIZE}")
    return dict(pools)


def _refuse_unknown_names(jobs: list[JobSpec]) -> None:
    """Names are unique, and a job that triggers or requires another of the file names
    one there."""
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise SpecError("name", "duplicate name", where=f"job {job.name!r}")
        seen.add(job.name)
    for job in jobs:
        upstreams = [r["job"] for r in job.controls.get("requires", ())]
        triggers = job.controls.get("triggers", ())
        for key, targets in (("triggers", triggers), ("requires", upstreams)):
            for target in targets:
                if "/" not in target and target not in seen:
                    why = f"no job named {target!r} in this file (use project/name for another)"
                    raise SpecError(key, why, where=f"job {job.name!r}")


def _with_default(entry: Any, alerts: Any) -> Any:
    if isinstance(entry, Mapping) and "alerts" not in entry:
        return {**entry, "alerts": alerts}
    return entry


def _refuse_unknown_channels(jobs: list[JobSpec], declared: dict[str, Any] | None) -> None:
    """Every channel a job sends to is declared: in the file or ``CRONCHAIN_CHANNELS``."""
    known = set(declared or ()) | set(channels_from_env())
    for job in jobs:
        for name in job.controls.get("alerts", {}).get("to", ()):
            if name not in known:
                why = f"no channel named {name!r} (under channels:, or in CRONCHAIN_CHANNELS)"
                raise SpecError("alerts.to", why, where=f"job {job.name!r}")
