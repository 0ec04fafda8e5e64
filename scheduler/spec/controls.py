"""How cronchain runs a job's invocations, whatever their kind: lease, timeout, retries,
overlap and misfire policies, the jobs triggered on success and the upstreams required.

In a job file these are top-level keys of a job. Only values that differ from the
defaults are kept in the normalized spec, so that adding a control to cronchain does
not change the revision of every existing job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from cronchain.scheduler.spec.model import DEFAULT_PRIORITY, RETRY_DEFAULTS, JobFields
from cronchain.statemachine import Misfire, MisfirePolicy, Overlap, OverlapPolicy, RetryPolicy

if TYPE_CHECKING:
    from cronchain.scheduler.spec.model import JobModel

# The job fields that are controls: every field of the spec's model but what names the
# job and when it runs.
WHEN = ("schedule", "timezone", "days")
KEYS = tuple(k for k in JobFields.model_fields if k != "name" and k not in WHEN)
DEFAULT_LEASE = 60.0
# Long enough that a worker outage of minutes, or a deep queue, never fails a run.
DEFAULT_SCHEDULE_TO_START = 3600.0
# How long a slot waits for its upstreams (``requires``) and gates before ``on_unmet``.
DEFAULT_MAX_WAIT = 3600.0


@dataclass(frozen=True)
class Upstream:
    """A job a slot requires, as written (``name`` or ``project/name``), and how fresh
    its success must be."""

    job: str
    within: timedelta


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
    priority: int = DEFAULT_PRIORITY
    requires: tuple[Upstream, ...] = ()
    max_wait: timedelta = timedelta(seconds=DEFAULT_MAX_WAIT)
    on_unmet: str = "skip"
    pool: str | None = None
    # The readiness checks (``scheduler.workflows.gates``), each as normalized: name, every and
    # one of http or celery.
    gates: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Controls:
        """The controls of a normalized spec (as stored in ``jobs.spec``)."""
        retries = {**RETRY_DEFAULTS, **spec.get("retries", {})}
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
            priority=spec.get("priority", DEFAULT_PRIORITY),
            requires=tuple(
                Upstream(r["job"], timedelta(seconds=r["succeeded_within"]))
                for r in spec.get("requires", ())
            ),
            max_wait=timedelta(seconds=spec.get("max_wait", DEFAULT_MAX_WAIT)),
            on_unmet=spec.get("on_unmet", "skip"),
            pool=spec.get("pool"),
            gates=tuple(spec.get("gates", ())),
            misfire=MisfirePolicy(
                Misfire(spec.get("misfire", Misfire.LATEST.value)),
                grace=None if grace is None else timedelta(seconds=grace),
                catchup_limit=spec.get("catchup_limit", MisfirePolicy.catchup_limit),
            ),
        )


_CONTROLS: dict[str, Controls] = {}
_KEYSET = frozenset(KEYS)  # a spec holds a few keys: read them, not all the controls'


class Specified(Protocol):
    """Anything with a job's normalized spec: a stored job's row, most often."""

    @property
    def spec(self) -> Mapping[str, Any]: ...


def controls_of(job: Specified) -> Controls:
    """A job's controls, parsed once per set of values: most jobs share the defaults,
    and keying by revision (one per job) parsed them again for every job of a large
    apply."""
    key = repr([item for item in job.spec.items() if item[0] in _KEYSET])
    controls = _CONTROLS.get(key)
    if controls is None:
        if len(_CONTROLS) > 8192:
            _CONTROLS.clear()
        controls = _CONTROLS[key] = Controls.of(job.spec)
    return controls


# The controls that have a default, which the normalized spec leaves out.
_DEFAULTS: dict[str, Any] = {
    "schedule_to_start": DEFAULT_SCHEDULE_TO_START,
    "lease": DEFAULT_LEASE,
    "overlap": Overlap.SKIP.value,
    "max_buffered": OverlapPolicy.max_buffered,
    "max_concurrent": OverlapPolicy.max_concurrent,
    "misfire": Misfire.LATEST.value,
    "catchup_limit": MisfirePolicy.catchup_limit,
    "priority": DEFAULT_PRIORITY,
    "max_wait": DEFAULT_MAX_WAIT,
    "on_unmet": "skip",
}


def normalized(job: JobModel) -> dict[str, Any]:
    """The controls of a validated job that are not defaults, in the stored form."""
    out = {
        key: value
        for key, default in _DEFAULTS.items()
        if (value := getattr(job, key)) not in (None, default)
    }
    for key in ("timeout", "misfire_grace", "pool"):  # no default: kept whenever given
        if (value := getattr(job, key)) is not None:
            out[key] = value
    if job.retries is not None and (retries := job.retries.normalized()):
        out["retries"] = retries
    if job.triggers:
        out["triggers"] = sorted(set(job.triggers))
    if job.gates:
        out["gates"] = [g.normalized() for g in job.gates]
    if job.requires:
        out["requires"] = sorted((r.normalized() for r in job.requires), key=lambda r: r["job"])
    if job.paused:
        out["paused"] = job.paused
    if job.alerts is not None:
        out["alerts"] = job.alerts.normalized()
    return out
