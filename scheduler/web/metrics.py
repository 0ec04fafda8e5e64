"""``GET /metrics``: Prometheus metrics computed from the database at scrape time.

Nothing is counted in the workers' memory, so any number of worker processes (prefork,
threads, many machines) need no multiprocess setup, and any number of ``cronchain
serve`` processes answer alike. Each scrape reads the job registry and a few indexes
(``scheduler.storage.observed``): four short queries in one transaction.

Per job (labels ``project``, ``job``):

- ``cronchain_job_last_success_timestamp_seconds``: when its newest success finished,
  0 if it never succeeded (every job has the series, so an alert needs no ``absent()``);
- ``cronchain_job_next_tick_timestamp_seconds``: the slot its pending tick stands for;
  no series for a job without one (paused, disabled, a triggered job);
- ``cronchain_job_state``: 1, with the job's state as the ``state`` label (DISABLED,
  SCHEDULED, SUSPENDED, QUEUED, RUNNING, OVERRUN): one series per job, not one per state.

Overall: ``cronchain_slots_total{outcome,reason}`` (runs ended),
``cronchain_fire_lag_seconds`` (a histogram of claim minus slot), both counted by
triggers as runs end and start (migration 0008), ``cronchain_watchdog_last_pass_timestamp_seconds``,
``cronchain_watchdog_repairs_total{kind}``, ``cronchain_overdue_ticks``,
``cronchain_overdue_tick_seconds`` and ``cronchain_runs_waiting{reason}``.

The per-job families are three lines per job: at 10,000 jobs, prometheus_client's text
writer spent 400 ms on them (a label-name check and escape per label per sample), so
``render`` writes them itself, in the same format (a test parses both and compares), and
leaves the others to prometheus_client. ``DatabaseCollector`` yields them all, for a
registry of one's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import Engine

from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage import observed
from cronchain.scheduler.storage.models import JOB_STATES

# The reasons a WAITING run has today, reported at 0 when none waits, so that a rate or
# an alert on them has a series to read.
WAITING_REASONS = ("buffered", "backfill", "upstream", "gate", "pool")
# Outcomes reported at 0 before any run had them, for the same reason.
OUTCOMES = (("SUCCEEDED", ""), ("FAILED", ""))
JOB = ("project", "job")
JOB_FAMILIES = (  # name, help; each a gauge
    (
        "cronchain_job_last_success_timestamp_seconds",
        "When the job's newest successful run finished (0: never)",
    ),
    ("cronchain_job_next_tick_timestamp_seconds", "The slot the job's pending tick stands for"),
    ("cronchain_job_state", f"1, with the job's state as a label ({', '.join(JOB_STATES)})"),
)


@dataclass(frozen=True)
class Observed:
    """What one scrape read, in one transaction."""

    jobs: list[tuple[str, str, str, float | None, float | None]]
    passes: observed.WatchdogPasses
    overdue: observed.Overdue
    waiting: dict[str, int]
    slots: dict[tuple[str, str], int]
    lags: observed.FireLags
    now: datetime


class DatabaseCollector(Collector):
    """A prometheus_client collector that reads the database on each ``collect``."""

    def __init__(
        self, db: Engine, settings: Settings, now: Callable[[], datetime] | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.now = now or (lambda: datetime.now(UTC))

    def read(self) -> Observed:
        now = self.now()
        with self.db.connect() as conn:
            return Observed(
                jobs=observed.job_series(conn),
                passes=observed.watchdog_passes(conn),
                overdue=observed.overdue_ticks(conn, now - self.settings.watchdog_grace),
                waiting=observed.waiting_by_reason(conn),
                slots=observed.slots_by_outcome(conn),
                lags=observed.fire_lag_histogram(conn),
                now=now,
            )

    def collect(self) -> Iterator[Metric]:
        seen = self.read()
        yield from _job_metrics(seen.jobs)
        yield from _overall_metrics(seen)


def registry(
    db: Engine, settings: Settings, now: Callable[[], datetime] | None = None
) -> CollectorRegistry:
    """A registry holding the database collector alone (``now``: a test's clock)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(DatabaseCollector(db, settings, now))
    return found


def render(collector: DatabaseCollector) -> bytes:
    """The text format of one scrape: the per-job families written here, the others by
    prometheus_client (see the module's docstring)."""
    seen = collector.read()
    overall = CollectorRegistry(auto_describe=False)
    overall.register(_Fixed(list(_overall_metrics(seen))))
    return _job_text(seen.jobs).encode() + generate_latest(overall)


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def _job_text(jobs: list[tuple[str, str, str, float | None, float | None]]) -> str:
    """The per-job families in Prometheus's text format: the HELP and TYPE lines, the
    samples and their labels as prometheus_client writes them; values in Python's repr
    of a float (``1772366410.0``) where prometheus_client writes Go's (``1.77236641e+09``),
    which the format takes alike."""
    success, ticks, states = ([f"# HELP {n} {h}", f"# TYPE {n} gauge"] for n, h in JOB_FAMILIES)
    for project, name, state, next_tick, last_success in jobs:
        labels = f'job="{_escape(name)}",project="{_escape(project)}"'
        success.append(f"{JOB_FAMILIES[0][0]}{{{labels}}} {float(last_success or 0)!r}")
        if next_tick is not None:
            ticks.append(f"{JOB_FAMILIES[1][0]}{{{labels}}} {float(next_tick)!r}")
        states.append(f'{JOB_FAMILIES[2][0]}{{{labels},state="{state}"}} 1.0')
    return "\n".join([*success, *ticks, *states, ""])


def _escape(value: str) -> str:
    """A label value escaped as the text format wants (job and project names hold none
    of these characters; this is for safety, and costs nothing when they are absent)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _job_metrics(
    jobs: list[tuple[str, str, str, float | None, float | None]],
) -> Iterator[Metric]:
    success, next_tick = (GaugeMetricFamily(n, h, labels=JOB) for n, h in JOB_FAMILIES[:2])
    state = GaugeMetricFamily(*JOB_FAMILIES[2], labels=[*JOB, "state"])
    for project, name, job_state, tick, last_success in jobs:
        success.add_metric([project, name], float(last_success or 0))
        if tick is not None:
            next_tick.add_metric([project, name], float(tick))
        state.add_metric([project, name, job_state], 1.0)
    return iter((success, next_tick, state))


def _overall_metrics(seen: Observed) -> Iterator[Metric]:
    passes, overdue = seen.passes, seen.overdue
    slots = CounterMetricFamily(
        "cronchain_slots",
        "Runs ended (a slot's, or a triggered run), by outcome and reason ('' for none)",
        labels=["outcome", "reason"],
    )
    for (outcome, reason), count in sorted((dict.fromkeys(OUTCOMES, 0) | seen.slots).items()):
        slots.add_metric([outcome, reason], count)
    yield slots
    yield HistogramMetricFamily(
        "cronchain_fire_lag_seconds",
        "Slots' first attempts, by the time from the slot to a worker's claim",
        buckets=seen.lags.buckets,
        sum_value=seen.lags.seconds,
    )
    yield GaugeMetricFamily(
        "cronchain_watchdog_last_pass_timestamp_seconds",
        "When the watchdog's newest pass ended (0: never)",
        value=passes.passed_at.timestamp() if passes.passed_at else 0.0,
    )
    repairs = CounterMetricFamily(
        "cronchain_watchdog_repairs", "Steps the watchdog repaired, by kind", labels=["kind"]
    )
    for kind, count in passes.repairs.items():
        repairs.add_metric([kind], count)
    yield repairs
    yield GaugeMetricFamily(
        "cronchain_overdue_ticks",
        "Pending ticks whose slot is past its grace (half a watchdog interval)",
        value=overdue.count,
    )
    oldest = 0.0 if overdue.oldest is None else (seen.now - overdue.oldest).total_seconds()
    yield GaugeMetricFamily(
        "cronchain_overdue_tick_seconds",
        "How long ago the oldest overdue tick's slot was (0: none is overdue)",
        value=oldest,
    )
    reasons = GaugeMetricFamily(
        "cronchain_runs_waiting",
        "Runs WAITING for their turn, their upstreams, their gates or a place in their pool,"
        " by reason",
        labels=["reason"],
    )
    for reason in sorted(set(WAITING_REASONS) | set(seen.waiting)):
        reasons.add_metric([reason], seen.waiting.get(reason, 0))
    yield reasons
