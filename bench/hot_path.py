"""The engine's cost per fire, in this process, with no broker: where the time goes, on
each of the two paths.

    python -m bench.hot_path [--jobs 1000] [--rounds 3] [--per-task 1] [--profile]

N no-op jobs on PostgreSQL; each round moves a fake clock to the next slot and then:

- the control path: delivers every tick in batches, as the control worker's tasks get
  them; a tick begins its run in its own transaction (RUNNING, not yet claimed) and
  sends it to the work path (kept in a list here), with any start sent as a message;
- the work path: does with the runs sent what a work-path worker does with its
  messages (``scheduler.workers.work``): claims the attempts of a batch together, runs
  the no-ops, records each outcome.

Before the rounds the process freezes its heap and sets its collector as a worker process
does once its runtime is made (``scheduler.workers.heap``): the figures are a worker's.

Figures, for each path and for both: engine CPU and wall time per fire, PostgreSQL's CPU
per fire (its server's processes, if they run on this machine; they must serve nothing
else meanwhile), database transactions per fire (PostgreSQL's count: a new connection is one
more), and connections the engine's pool opened per fire. ``--profile`` prints
pyinstrument's profile of each path's part of the rounds (``pip install -e .[bench]``).

``--per-task 1`` delivers each tick alone (a task of its own), as the ticks of jobs
whose slots are spread reach the control path: the cost of a lone tick.

``--alerts`` gives every job alerts (none raised, as its runs succeed on time): run it
beside the plain load for what a job's alerts cost each fire.

``--counters both`` measures the cost of /metrics' counters (migrations 0009's and
0016's triggers on ``invocations``): the rounds alternate between the triggers enabled
and disabled on the same database, and each arm prints its figures (``counters=on``,
``counters=off``) and ``counters_wall_ratio``, on over off, for both paths together.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import event

from bench.common import (
    database,
    figure,
    history_partitions,
    history_runs,
    postgres_cpu,
    transactions,
    with_requirements,
)
from cronchain.scheduler.declare.apply import apply
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.workers import heap, work
from tests.support.engine import Clock, RecordingPort


def flushed_transactions(db: Any) -> int:
    """The database's transactions so far, every one of this process's counted: an idle
    backend of PostgreSQL 15 holds its statistics up to 10 s, one that exits flushes
    them, so the pool's connections are closed first (its one reconnection per part costs
    a few ms, which the 1,000 fires of a part hardly notice)."""
    db.dispose()
    time.sleep(0.3)  # the backends' exit
    return transactions(db)


@dataclass
class Cost:
    """What one path spent over the rounds."""

    cpu: float = 0.0
    wall: float = 0.0
    transactions: int = 0
    connections: int = 0  # opened to PostgreSQL (each also counts as a transaction there)
    database: float | None = 0.0  # PostgreSQL's CPU seconds; None: not on this machine
    profiler: Any = None
    # What a part that does nothing costs: the counting's own.
    overhead: tuple[int, int, float] = (0, 0, 0.0)

    def add(self, db: Any, part: Callable[[], None]) -> None:
        x0, c0 = flushed_transactions(db), CONNECTS[0]
        d0 = postgres_cpu(db)
        if self.profiler is not None:
            self.profiler.start()
        cpu, wall = time.process_time(), time.perf_counter()
        part()
        self.cpu += time.process_time() - cpu
        self.wall += time.perf_counter() - wall
        if self.profiler is not None:
            self.profiler.stop()
        self.transactions += flushed_transactions(db) - x0 - self.overhead[0]
        self.connections += CONNECTS[0] - c0 - self.overhead[1]
        d1 = postgres_cpu(db)
        if d0 is None or d1 is None or self.database is None:
            self.database = None
        else:
            self.database += d1 - d0 - self.overhead[2]


CONNECTS = [0]  # connections the engine's pool has opened
WORK_THREADS = 100  # CRONCHAIN_WORK_CONCURRENCY's default: the calls of a batch


def rounds(
    engine: Engine,
    port: RecordingPort,
    clock: Clock,
    n: int,
    costs: dict,
    strict: bool = True,
    per_task: int | None = None,
) -> int:
    """``n`` rounds of every job's slot, each path's part timed in ``costs``; the fires.
    ``strict``: every fire's run must be claimed and recorded within its round.
    ``per_task``: the ticks a task delivers together (the engine's batch unless given)."""
    per_task = per_task or engine.batch
    fires = claimed = 0
    for _ in range(n):
        clock.advance(10)
        ticks = [(job_id, nonce) for job_id, nonce, _eta in port.ticks]
        port.clear()

        def tick(ticks: list[tuple[int, int]] = ticks) -> None:
            for i in range(0, len(ticks), per_task):  # as the tasks do, by batch
                engine.tick_many(ticks[i : i + per_task], start_here=True)
            starts, port.starts[:] = list(port.starts), []
            for invocation_id in starts:  # none expected: runs begin in their tick
                engine.attempts.start_invocation(invocation_id)

        costs["control"].add(engine.db, tick)
        # What was sent: runs begun together as one cronchain.run_batch, others alone.
        batches, batched = list(port.run_batches), {id(c) for b in port.run_batches for c in b}
        singles = [c for c in port.runs if id(c) not in batched]
        port.runs[:], port.run_batches[:] = [], []

        def run(batches: list[list[Any]] = batches, singles: list[Any] = singles) -> None:
            nonlocal claimed
            for batch in batches:  # as the work path's cronchain.run_batch task does
                attempts = [c.ref for c in batch]  # what its message names
                claimed += len(work.execute_batch(engine, attempts, "bench", WORK_THREADS))
            for c in singles:  # and its cronchain.run task
                outcome = work.execute(engine, *c.ref[:2], "bench", c.job_id, c.filed_at)
                claimed += outcome is not None

        costs["work"].add(engine.db, run)
        fires += len(ticks)  # each tick fires its slot
    if strict and claimed != fires:
        raise SystemExit(f"{fires} fires but {claimed} runs claimed and recorded")
    return fires


def warm_up(engine: Engine, port: RecordingPort, clock: Clock, overhead: tuple) -> None:
    """A round not measured, then every run its upstreams' successes released: the
    jobs that require others find their upstreams' last success from then on."""
    rounds(engine, port, clock, 1, {p: Cost(overhead=overhead) for p in ("control", "work")}, False)
    while port.starts or port.runs:
        starts, port.starts[:] = list(port.starts), []
        for invocation_id in starts:
            engine.attempts.start_invocation(invocation_id)
        calls, port.runs[:], port.run_batches[:] = list(port.runs), [], []
        for call in calls:
            work.execute(engine, call.invocation_id, call.attempt, "bench")


# Migrations 0009's and 0016's triggers: the counters of /metrics (0016's other trigger,
# which keeps each job's outcomes, stays on: ``requires`` reads them).
COUNTER_TRIGGERS = ("invocations_count_inserted", "invocations_count_updated")


def counting(db: Any, on: bool) -> None:
    """Enable or disable the counters' triggers (on every partition)."""
    with db.begin() as conn:
        for trigger in COUNTER_TRIGGERS:
            verb = "ENABLE" if on else "DISABLE"
            conn.exec_driver_sql(f"ALTER TABLE invocations {verb} TRIGGER {trigger}")


def print_costs(name: str, costs: dict[str, Cost], fires: int) -> float:
    """Each path's figures, and both together; returns both paths' wall time per fire."""
    costs["both"] = Cost(
        sum(c.cpu for c in costs.values()),
        sum(c.wall for c in costs.values()),
        sum(c.transactions for c in costs.values()),
        sum(c.connections for c in costs.values()),
        None
        if any(c.database is None for c in costs.values())
        else sum(c.database or 0.0 for c in costs.values()),
    )
    for path, cost in costs.items():
        prefix = "" if path == "both" else f"{path}_"
        figure(name, f"{prefix}engine_cpu_per_fire", cost.cpu / fires * 1000, "ms")
        figure(name, f"{prefix}wall_per_fire", cost.wall / fires * 1000, "ms")
        if cost.database is not None:
            figure(name, f"{prefix}database_cpu_per_fire", cost.database / fires * 1000, "ms")
        figure(name, f"{prefix}transactions_per_fire", cost.transactions / fires)
        figure(name, f"{prefix}connections_per_fire", cost.connections / fires)
    for path, cost in costs.items():
        if cost.profiler is not None:
            print(f"--- {path} path ---")
            print(cost.profiler.output_text(unicode=False, color=False, show_all=False))
    return costs["both"].wall / fires


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.hot_path", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--per-task",
        type=int,
        default=None,
        help="ticks delivered together (the engine's batch, CRONCHAIN_TICK_BATCH's default,"
        " unless given); 1: each"
        " tick alone, as jobs whose slots are spread reach the control path",
    )
    parser.add_argument(
        "--counters",
        choices=("on", "both"),
        default="on",
        help="both: alternate rounds with /metrics' counters (triggers) on and off",
    )
    parser.add_argument(
        "--alerts",
        action="store_true",
        help="every job has alerts (failed, recovered, late_start>1h, running_longer>1h):"
        " what raising costs a job whose runs succeed, on time",
    )
    parser.add_argument(
        "--requires",
        action="store_true",
        help="every third job requires three others, met (bench.common.with_requirements):"
        " what checking them, and the upstreams' releases, cost; a round not measured first",
    )
    parser.add_argument(
        "--history-months",
        type=int,
        default=7,
        help="history partitions before the clock's month (PostgreSQL), as 180 days of"
        " retention keep: an id lookup probes each",
    )
    parser.add_argument(
        "--history-runs",
        type=int,
        default=0,
        help="runs of each job in each history month (28 at most: a day apart); 0: the"
        " months are empty, the cheapest probe",
    )
    return parser


def specs_of(args: argparse.Namespace) -> list[JobSpec]:
    """The jobs: every 10 s, all at one instant, with alerts or requirements if asked."""
    alerts = {"on": ["failed", "recovered", "late_start>1h", "running_longer>1h"], "to": ["x"]}
    os.environ["CRONCHAIN_CHANNELS"] = '{"x": {"webhook": "http://127.0.0.1:9/"}}'
    extra = {"alerts": alerts} if args.alerts else {}
    entries = [
        {"name": f"j{i}", "schedule": "every 10s", "noop": {}, **extra} for i in range(args.jobs)
    ]
    if args.requires:
        with_requirements(entries, within="20s")
    return [JobSpec.from_dict("bench", e) for e in entries]


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    kinds = "".join(f",{k}" for k in ("alerts", "requires") if getattr(args, k))
    per_task = f",per_task={args.per_task}" if args.per_task else ""
    name = f"hot_path[jobs={args.jobs}{kinds}{per_task}]"
    with database() as (_, db):
        clock, port = Clock(), RecordingPort()
        engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
        apply(engine, "bench", specs_of(args))
        history_partitions(db, clock.now, args.history_months)
        history_runs(db, clock.now, args.history_months, args.history_runs)
        event.listen(db, "connect", lambda *_: CONNECTS.__setitem__(0, CONNECTS[0] + 1))
        heap.freeze("runtime")  # as a worker process does once its runtime is made
        empty = Cost()
        empty.add(db, lambda: None)
        overhead = (empty.transactions, empty.connections, empty.database or 0.0)
        arms = ["on", "off"] if args.counters == "both" else ["on"]
        costs = {arm: {p: Cost(overhead=overhead) for p in ("control", "work")} for arm in arms}
        if args.profile:
            from pyinstrument import Profiler

            for arm in costs.values():
                for cost in arm.values():
                    cost.profiler = Profiler()
        if args.requires:  # the first slot has no upstream success to find: it waits
            warm_up(engine, port, clock, overhead)
        fires = dict.fromkeys(arms, 0)
        for _ in range(args.rounds):  # the arms alternate, so that drift hits both alike
            for arm in arms:
                if len(arms) > 1:
                    counting(db, arm == "on")
                fires[arm] += rounds(engine, port, clock, 1, costs[arm], per_task=args.per_task)
        walls = {}
        for arm in arms:
            label = name if len(arms) == 1 else f"{name[:-1]},counters={arm}]"
            walls[arm] = print_costs(label, costs[arm], fires[arm])
        if len(arms) > 1:
            figure(name, "counters_wall_ratio", walls["on"] / walls["off"])


if __name__ == "__main__":
    main()
