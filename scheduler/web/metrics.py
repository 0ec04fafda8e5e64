"""``GET /metrics``: Prometheus metrics computed from the database at scrape time.

Nothing is counted in the workers' memory, so any number of worker processes (prefork,
threads, many machines) need no multiprocess setup, and any number of ``cronchain
serve`` processes answer alike. Each scrape reads the job registry and a few indexes
(``scheduler.storage.observed``): a few short queries in one transaction.

Per job (labels ``project`` and ``job_name``: a scrape's target labels are ``job`` and
``instance``, and Prometheus would rename a series' own to ``exported_job``):

- ``cronchain_job_last_success_timestamp_seconds``, ``..._last_failure_...``: when its
  newest success (failure) finished, 0 if none did (every job has the series, so an
  alert needs no ``absent()``);
- ``cronchain_job_next_tick_timestamp_seconds``: the slot its pending tick stands for;
  no series for a job without one (paused, disabled, a triggered job);
- ``cronchain_job_failures_total``: runs that ended FAILED;
- ``cronchain_job_run_duration_seconds``: a summary (count and sum) of the runs that
  started and ended, from the claim of the last attempt to the end;
- ``cronchain_job_state``: one series per state, 1 for the job's state and 0 for the
  others, as kube-state-metrics writes a state (an alert on ``== 1`` needs no regex).

``CRONCHAIN_METRICS_PER_JOB=false`` leaves them out (a registry too large to scrape
job by job); ``cronchain_jobs{state}`` counts the jobs in each state either way. Without
them, a count that took longer than 50 ms (a million jobs) is reused for a minute.

Overall: ``cronchain_build_info{version}``, ``cronchain_slots_total{outcome,reason}``
(runs ended), ``cronchain_fire_lag_seconds`` (a histogram of claim minus slot), both
counted by triggers as runs end and start (migration 0008),
``cronchain_watchdog_last_pass_timestamp_seconds``, ``cronchain_watchdog_repairs_total{kind}``,
``cronchain_overdue_ticks``, ``cronchain_overdue_tick_seconds`` and
``cronchain_runs_waiting{reason}``.

The per-job families are a dozen lines per job: at 10,000 jobs, prometheus_client's text
writer spent 400 ms on three of them (a label-name check and escape per label per
sample), so ``render`` writes them itself, in the same format (a test parses both and
compares), and leaves the others to prometheus_client. ``DatabaseCollector`` yields
them all, for a registry of one's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import Connection, Engine

from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage import observed
from cronchain.scheduler.storage.clock import database_clock
from cronchain.scheduler.storage.models import JOB_STATES
from cronchain.scheduler.version import VERSION
from cronchain.statemachine.reasons import WAITING_REASONS

# The reasons a WAITING run has (WAITING_REASONS) are reported at 0 when none waits, so
# that a rate or an alert on them has a series to read.
# Outcomes reported at 0 before any run had them, for the same reason.
OUTCOMES = (("SUCCEEDED", ""), ("FAILED", ""))
JOB = ("project", "job_name")
# The per-job families: name, help, type, whether every job has a series.
LAST_SUCCESS = "cronchain_job_last_success_timestamp_seconds"
LAST_FAILURE = "cronchain_job_last_failure_timestamp_seconds"
NEXT_TICK = "cronchain_job_next_tick_timestamp_seconds"
FAILURES = "cronchain_job_failures"
DURATION = "cronchain_job_run_duration_seconds"
STATE = "cronchain_job_state"
HELP = {
    LAST_SUCCESS: "When the job's newest successful run finished (0: never)",
    LAST_FAILURE: "When the job's newest failed run finished (0: never)",
    NEXT_TICK: "The slot the job's pending tick stands for",
    FAILURES: "The job's runs that ended FAILED",
    DURATION: "The job's runs that started and ended: seconds from the claim to the end",
    STATE: f"1 for the job's state, 0 for the others ({', '.join(JOB_STATES)})",
}


@dataclass(frozen=True)
class Observed:
    """What one scrape read, in one transaction."""

    jobs: list[observed.JobSeries]  # empty without per-job series
    states: dict[str, int]
    passes: observed.WatchdogPasses
    overdue: observed.Overdue
    waiting: dict[str, int]
    slots: dict[tuple[str, str], int]
    lags: observed.FireLags
    now: datetime


# A count of the jobs by state that took longer than SLOW_COUNT seconds is kept, and
# counted again beside the scrapes once STALE_COUNT old.
SLOW_COUNT = 0.05
STALE_COUNT = timedelta(minutes=1)

log = logging.getLogger("cronchain.metrics")


class DatabaseCollector(Collector):
    """A prometheus_client collector that reads the database on each ``collect``."""

    def __init__(
        self, db: Engine, settings: Settings, now: Callable[[], datetime] | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.now = now or database_clock(db)
        self._counted: tuple[datetime, dict[str, int]] | None = None  # (stale at, counts)
        self._recounting = threading.Lock()  # held by the one recount under way

    def read(self) -> Observed:
        now = self.now()
        with self.db.connect() as conn:
            per_job = observed.job_series(conn) if self.settings.metrics_per_job else []
            return Observed(
                jobs=per_job,
                states=_states(per_job) if per_job else self._jobs_by_state(conn, now),
                passes=observed.watchdog_passes(conn),
                overdue=observed.overdue_ticks(conn, now - self.settings.watchdog_grace),
                waiting=observed.waiting_by_reason(conn),
                slots=observed.slots_by_outcome(conn),
                lags=observed.fire_lag_histogram(conn),
                now=now,
            )

    def _jobs_by_state(self, conn: Connection, now: datetime) -> dict[str, int]:
        """The jobs in each state. Counting them reads the whole registry: 3 ms at
        10,000 jobs, 230 ms at a million, more than the rest of a scrape together. A count
        that took longer than ``SLOW_COUNT`` is kept, so that the scrapes of a large
        registry read indexes only: once it is ``STALE_COUNT`` old, a scrape still
        answers with it and has it counted again on a thread of its own, for the scrapes
        after it. Only the first scrape waits for a slow count; a quick one is never
        kept."""
        kept = self._counted
        if kept is None:
            return self._count(conn, now)
        if now >= kept[0] and self._recounting.acquire(blocking=False):
            try:
                threading.Thread(target=self._recount, args=(now,), daemon=True).start()
            except RuntimeError:  # no thread to be had: the next stale scrape tries again
                self._recounting.release()
        return kept[1]

    def _count(self, conn: Connection, now: datetime) -> dict[str, int]:
        started = time.perf_counter()
        states = observed.jobs_by_state(conn)
        slow = time.perf_counter() - started > SLOW_COUNT
        self._counted = (now + STALE_COUNT, states) if slow else None
        return states

    def _recount(self, now: datetime) -> None:
        """A failure keeps the count there was, for the next scrape to try again."""
        try:
            with self.db.connect() as conn:
                self._count(conn, now)
        except Exception:
            log.exception("the jobs could not be counted by state; the next scrape tries again")
        finally:
            self._recounting.release()

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


def _states(jobs: list[observed.JobSeries]) -> dict[str, int]:
    counted = dict.fromkeys(JOB_STATES, 0)
    for job in jobs:
        counted[job[2]] += 1
    return counted


def _job_text(jobs: list[observed.JobSeries]) -> str:
    """The per-job families in Prometheus's text format: the HELP and TYPE lines, the
    samples and their labels as prometheus_client writes them; values in Python's repr
    of a float (``1772366410.0``) where prometheus_client writes Go's (``1.77236641e+09``),
    which the format takes alike."""
    if not jobs:
        return ""
    blocks = {
        name: [f"# HELP {key} {HELP[name]}", f"# TYPE {key} {kind}"]
        for name, key, kind in (
            (LAST_SUCCESS, LAST_SUCCESS, "gauge"),
            (LAST_FAILURE, LAST_FAILURE, "gauge"),
            (NEXT_TICK, NEXT_TICK, "gauge"),
            (FAILURES, FAILURES + "_total", "counter"),
            (DURATION, DURATION, "summary"),
            (STATE, STATE, "gauge"),
        )
    }
    success, failure, ticks, failures, duration, states = blocks.values()
    others = [(s, f'state="{s}"') for s in JOB_STATES]
    for project, name, state, tick, succeeded, failed, count, timed, seconds in jobs:
        labels = f'job_name="{_escape(name)}",project="{_escape(project)}"'
        success.append(f"{LAST_SUCCESS}{{{labels}}} {float(succeeded or 0)!r}")
        failure.append(f"{LAST_FAILURE}{{{labels}}} {float(failed or 0)!r}")
        if tick is not None:
            ticks.append(f"{NEXT_TICK}{{{labels}}} {float(tick)!r}")
        failures.append(f"{FAILURES}_total{{{labels}}} {float(count)!r}")
        duration.append(f"{DURATION}_count{{{labels}}} {float(timed)!r}")
        duration.append(f"{DURATION}_sum{{{labels}}} {float(seconds)!r}")
        states += [f"{STATE}{{{labels},{s}}} {1.0 if one == state else 0.0}" for one, s in others]
    return "\n".join([*success, *failure, *ticks, *failures, *duration, *states, ""])


def _escape(value: str) -> str:
    """A label value escaped as the text format wants (job and project names hold none
    of these characters; this is for safety, and costs nothing when they are absent)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _job_metrics(jobs: list[observed.JobSeries]) -> Iterator[Metric]:
    if not jobs:
        return iter(())
    success, failure, next_tick = (
        GaugeMetricFamily(n, HELP[n], labels=JOB) for n in (LAST_SUCCESS, LAST_FAILURE, NEXT_TICK)
    )
    failures = CounterMetricFamily(FAILURES, HELP[FAILURES], labels=JOB)
    duration = SummaryMetricFamily(DURATION, HELP[DURATION], labels=JOB)
    state = GaugeMetricFamily(STATE, HELP[STATE], labels=[*JOB, "state"])
    for project, name, job_state, tick, succeeded, failed, count, timed, seconds in jobs:
        success.add_metric([project, name], float(succeeded or 0))
        failure.add_metric([project, name], float(failed or 0))
        if tick is not None:
            next_tick.add_metric([project, name], float(tick))
        failures.add_metric([project, name], count)
        duration.add_metric([project, name], count_value=timed, sum_value=seconds)
        for one in JOB_STATES:
            state.add_metric([project, name, one], 1.0 if one == job_state else 0.0)
    return iter((success, failure, next_tick, failures, duration, state))


def _overall_metrics(seen: Observed) -> Iterator[Metric]:
    passes, overdue = seen.passes, seen.overdue
    build = GaugeMetricFamily(
        "cronchain_build_info", "1, with cronchain's version", labels=["version"]
    )
    build.add_metric([VERSION], 1.0)
    yield build
    jobs = GaugeMetricFamily("cronchain_jobs", "Jobs, by state", labels=["state"])
    for state in JOB_STATES:
        jobs.add_metric([state], seen.states.get(state, 0))
    yield jobs
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
