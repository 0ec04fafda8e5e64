"""Herds: the fires that share one slot instant (10,000 jobs at the top of the minute),
and how long each takes to drain.

A herd is every fire of one slot instant: the jobs whose offset in the period
(``bench.load.offset``) is the instant's, so its expected size is the number of such
jobs. Its drain time is its slot to the start of its LAST run; a herd is complete when
every expected fire was recorded exactly once and started. An incomplete herd's drain is
infinite: a lower bound would flatter the system that lost the fires.

``Observed`` is what a system recorded for one herd, keyed by the herd's slot in
milliseconds since the epoch (the same key for a float slot stamped by beat and a
timestamp read back from PostgreSQL).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy
from sqlalchemy import func, select

from bench.common import figure
from bench.load import offset
from cronchain.scheduler.storage.models import invocations


@dataclass(frozen=True)
class Observed:
    """One herd as a system recorded it: the distinct fires recorded, how many of them
    started, the start of the last one (seconds since the epoch), and fires recorded
    more than once (the baselines only: cronchain's (job, slot) key forbids them). For
    cronchain also when the control path inserted the herd's last run, and when the last
    outcome was recorded: the drain split between the paths, and the outcomes' share of
    the work, which the drain (to the last start) does not see."""

    recorded: int
    started: int
    last_start: float | None
    duplicates: int = 0
    last_fed: float | None = None  # cronchain: the last run's insert by the control path
    last_finished: float | None = None  # cronchain: the last outcome, once all are in


def herd_members(jobs: int, period: float, step: float) -> dict[int, list[int]]:
    """The jobs of each herd, by the herd's offset in the period (milliseconds)."""
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(jobs):
        members[round(offset(i, jobs, period, step) * 1000)].append(i)
    return dict(members)


def expected_herds(
    jobs: int, period: float, step: float, start: float, end: float
) -> dict[int, int]:
    """Every herd whose slot lies in ``[start, end)`` (seconds since the epoch): its slot
    in milliseconds, and how many fires it has."""
    p = round(period * 1000)
    herds = {}
    for o, members in herd_members(jobs, period, step).items():
        slot = math.ceil((start * 1000 - o) / p) * p + o
        while slot < end * 1000:
            herds[slot] = len(members)
            slot += p
    return herds


def next_instant(jobs: int, period: float, step: float, after: float) -> float:
    """The first herd's slot strictly after ``after`` (seconds since the epoch)."""
    p = round(period * 1000)
    return (
        min(
            (math.floor((after * 1000 - o) / p) + 1) * p + o
            for o in herd_members(jobs, period, step)
        )
        / 1000
    )


def baseline_herds(records: Iterable[bytes | str], start: float, end: float) -> dict[int, Observed]:
    """The herds in ``[start, end)`` from a baseline's records (``started slot job``,
    one per task the worker started)."""
    seen: dict[int, set[int]] = defaultdict(set)
    fires: Counter[int] = Counter()
    last: dict[int, float] = {}
    for record in records:
        started, slot, job = (record.decode() if isinstance(record, bytes) else record).split()
        key = round(float(slot) * 1000)
        if start * 1000 <= key < end * 1000:
            seen[key].add(int(job))
            fires[key] += 1
            last[key] = max(last.get(key, 0.0), float(started))
    return {
        key: Observed(len(jobs), len(jobs), last[key], fires[key] - len(jobs))
        for key, jobs in seen.items()
    }


def complete(size: int, seen: Observed | None) -> bool:
    return seen is not None and seen.recorded == size and seen.started == size


def wait_drained(
    observe: Callable[[], dict[int, Observed]], expected: dict[int, int], deadline: float
) -> dict[int, Observed]:
    """Until every expected herd is complete, or ``deadline`` (``time.time()``) passes:
    what was observed then."""
    while True:
        observed = observe()
        if all(complete(size, observed.get(slot)) for slot, size in expected.items()):
            return observed
        if time.time() >= deadline:
            return observed
        time.sleep(1)


@dataclass
class HerdTally:
    """The herds of one run: how many, how many incomplete, the fires missing (expected
    but never recorded), recorded twice, or recorded but never started, and each herd's
    drain time in seconds (``inf`` for an incomplete one)."""

    herds: int
    incomplete: int
    missing: int
    duplicate: int
    unstarted: int
    drains: list[float]
    fed: list[float]  # cronchain: slot to the last run's insert, per complete herd
    finished: list[float]  # cronchain: slot to the last outcome (inf: one never came)

    @classmethod
    def of(cls, expected: dict[int, int], observed: dict[int, Observed]) -> HerdTally:
        incomplete = missing = duplicate = unstarted = 0
        drains, fed, finished = [], [], []
        for slot, size in sorted(expected.items()):
            seen = observed.get(slot, Observed(0, 0, None))
            missing += max(0, size - seen.recorded)
            duplicate += seen.duplicates
            unstarted += seen.recorded - seen.started
            if complete(size, seen) and seen.last_start is not None:
                drains.append(seen.last_start - slot / 1000)
                if seen.last_fed is not None:
                    fed.append(seen.last_fed - slot / 1000)
                    ended = seen.last_finished
                    finished.append(math.inf if ended is None else ended - slot / 1000)
            else:
                incomplete += 1
                drains.append(math.inf)
        return cls(len(expected), incomplete, missing, duplicate, unstarted, drains, fed, finished)

    @property
    def every_fire_recorded(self) -> bool:
        """Every fire of every herd recorded once (a herd was measured at all)."""
        return self.herds > 0 and self.missing == 0 and self.duplicate == 0

    def drain(self, tag: str) -> float:
        """``min``, ``p50`` (the median) or ``max`` of the herds' drain times."""
        if not self.drains:
            return math.nan
        return {"min": min, "p50": statistics.median, "max": max}[tag](self.drains)

    def print_figures(self, bench: str) -> None:
        figure(bench, "herds", self.herds)
        figure(bench, "herds_incomplete", self.incomplete)
        figure(bench, "every_fire_recorded", int(self.every_fire_recorded))
        figure(bench, "fires_missing", self.missing)
        figure(bench, "fires_duplicate", self.duplicate)
        figure(bench, "runs_unstarted", self.unstarted)
        for tag in ("min", "p50", "max"):
            figure(bench, f"drain_{tag}", self.drain(tag) * 1000, "ms")
        if self.fed:  # cronchain: where the drain went, and the outcomes after it
            figure(bench, "fed_max", max(self.fed) * 1000, "ms")
            figure(bench, "finished_max", max(self.finished) * 1000, "ms")


def print_comparison(bench: str, tallies: dict[str, HerdTally]) -> None:
    """The ``herd`` lines: cronchain's drain time over each other system's, median over
    median, worst herd over worst herd, and cronchain's worst over the other's best
    (``drain_max_over_S_min``: under 0.5, every herd of cronchain's drained in under half
    the time of every herd of the other's). Under 1: cronchain drains faster."""
    ours = tallies.get("cronchain")
    if ours is None:
        return
    for system, theirs in tallies.items():
        if system == "cronchain":
            continue
        for name, mine, other in (
            (f"drain_p50_over_{system}", ours.drain("p50"), theirs.drain("p50")),
            (f"drain_max_over_{system}", ours.drain("max"), theirs.drain("max")),
            (f"drain_max_over_{system}_min", ours.drain("max"), theirs.drain("min")),
        ):
            ratio = mine / other if other and not math.isnan(other) else math.nan
            figure(bench, name, ratio)


def cronchain_herds(db: sqlalchemy.Engine, start: float, end: float) -> dict[int, Observed]:
    """The herds in ``[start, end)`` as cronchain recorded them: the invocations of each
    slot, those a work-path worker claimed (started), the last claim, the last insert,
    and the last outcome (None until every run has one)."""
    slot, started = invocations.c.slot, invocations.c.worker.isnot(None)
    finished = invocations.c.finished_at
    query = (
        select(
            slot,
            func.count(),
            func.count().filter(started),
            func.max(invocations.c.started_at).filter(started),
            func.max(invocations.c.created_at),
            func.max(finished),
            func.count(finished),
        )
        .where(slot >= datetime.fromtimestamp(start, UTC), slot < datetime.fromtimestamp(end, UTC))
        .group_by(slot)
    )
    with db.connect() as conn:
        return {
            round(at.timestamp() * 1000): Observed(
                n,
                s,
                last.timestamp() if last else None,
                last_fed=fed.timestamp(),
                last_finished=done.timestamp() if done and ended == n else None,
            )
            for at, n, s, last, fed, done, ended in conn.execute(query)
        }
