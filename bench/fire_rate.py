"""Sustained fires per second and fire lag, cronchain against Celery beat and RedBeat.

    python -m bench.fire_rate [--jobs 1000] [--period 10] [--window 40] [--step 0]
                              [--systems cronchain,beat,redbeat,bare] [--rates 300,500]
                              [--delay-ms 0]

N no-op jobs fire every P seconds, spread evenly over the period (``every P offset O``);
with ``--step 1`` on whole seconds, as cron jobs are, so that jobs share instants.
Each system gets the same slots, a fresh private Redis, and one worker with
``--concurrency 2``; cronchain is deployed as ``cronchain up`` deploys it, with the work
path besides (a worker of 100 threads that claims and runs each noop run). Lag is the
start of each run minus its slot, for every run that started inside the measured window:
for cronchain, the moment a work-path worker claimed it. cronchain also records every
fire in PostgreSQL; the baselines record nothing. cronchain's ``worker`` figures are both
paths together; ``control`` and ``work`` are each path alone.

Herds (``bench.herds``). With ``--step``, the fires that share a slot instant are a herd
(``--period 60 --step 60``: every job at the top of each minute). The window starts just
before a herd's instant, and is by default 40 s or three steps, whichever is longer (three
herds at ``--step 60``). After it, every herd whose slot lies in the window is followed
until it is complete or ``max(30 s, period)`` has passed. A herd's *drain time* is its
slot to the start of its last run, ``inf`` if the herd was incomplete (a fire never
recorded, or recorded and never started, by the end of that wait); ``drain_p50`` (the
median) and ``drain_max`` are over the window's herds. ``every_fire_recorded`` is 1 when
each herd has exactly its jobs' fires: cronchain's invocations per slot (one per job, by
its (job, slot) key); the baselines' starts per slot, counted per entry
(``fires_duplicate``: an entry started twice). A run is ``sustained`` when every fire was
recorded once and started by the end of that wait, the p99 lag of the runs started in the
window is under 1 s, and no process exited.

``bare`` (``bench.bare``) is the floor: the baselines' worker, same flags, no scheduler;
the benchmark queues one empty task per fire at each herd's instant, the whole herd at
once. The ``herd`` lines divide cronchain's drain time by each other system's of the
same run (``bench.herds.print_comparison``: median over median, worst herd over worst
herd, and cronchain's worst herd over the other's best): under 1, cronchain drains faster.

``cronchain+requires`` is cronchain with a third of the jobs requiring three others
each, met (``bench.common.with_requirements``): the ``requires`` line divides its lag p99
by plain cronchain's of the same run.

``cronchain+monitored`` and ``cronchain+flower`` are cronchain with task events on, as
Flower turns them on: Celery's own alone, and with each run's (``scheduler.workers.events``,
what lets Flower show runs under their jobs). Their CPU per fire against plain
cronchain's, in one run, is what a monitored deployment pays, before and after.

``--delay-ms 1`` puts a round trip of 1 ms between each system and its servers (Redis;
PostgreSQL for cronchain) through ``bench.delay``'s proxies, which this machine's kernel,
without netem, cannot add. Each run prints the round trips it measured through them
(``broker_round_trip``, ``database_round_trip``: the proxies' own hop comes on top of the
delay asked for) and their CPU per fire (``network_cpu_per_fire``), which a real network
would not take from the machine's two cores.

``--baseline REV`` adds ``cronchain@REV`` to the systems (right after ``cronchain``):
the code at git revision REV, from a worktree, on a database its own migrations make.
``--repeat N`` runs the systems in turn N times, so that a drift of the machine's speed
hits both alike; with a baseline, the ``ab`` line divides cronchain's mean worker CPU
per fire (both paths, and each path), its deployment's CPU and its lag p99 by the
baseline's: under 1, the current code is cheaper.

``--rates 300,400,500`` finds a ceiling: for each rate, ascending, each system runs
``rate * period`` jobs (``--jobs`` is ignored), the systems taking turns at each rate, and
a system stops at its first rate not sustained. Each run prints its figures; then one line
per rate tried (``rate_R_sustained``: 1 or 0) and ``ceiling``, the highest rate sustained
(0 if none), per system. A run lasts 60-100 s (apply, settle 10-20 s, the window, the
drain wait, stop): five rates for two systems take 12-18 minutes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery

from bench.bare import BareHerds
from bench.common import (
    MachineCpu,
    PeakRss,
    analyze,
    cluster,
    deployment,
    figure,
    first_waits_over,
    history_partitions,
    history_runs,
    job_document,
    measure,
    percentile,
    previous_code,
    recent_lags,
    settle,
    started_runs,
    transactions,
)
from bench.delay import Delays, delays, round_trips
from bench.herds import (
    HerdTally,
    baseline_herds,
    cronchain_herds,
    expected_herds,
    next_instant,
    print_comparison,
    wait_drained,
)
from tests.e2e.harness import Cluster
from tests.support.services import redis_server

SYSTEMS = (
    "cronchain",
    "beat",
    "redbeat",
    "bare",
    "cronchain+requires",
    "cronchain+monitored",
    "cronchain+flower",
)
# Task events on, as Flower turns them on as it starts (a control broadcast): Celery's
# own only (``+monitored``, CRONCHAIN_RUN_EVENTS=false: before the work path sent its runs'
# events), or with each run's (``+flower``). No monitor reads them here: what is
# measured is what sending them costs the workers.
EVENTS = {"cronchain+monitored": "celery", "cronchain+flower": "runs"}
CEILING_SYSTEMS = ("cronchain", "redbeat")
SUSTAINED_P99 = 1.0  # seconds
HISTORY_RUNS = 28  # runs of each job in each month of --history-months, a day apart


@dataclass
class Load:
    """N jobs every P seconds, on multiples of ``step`` (0: spread), measured ``window``
    seconds."""

    jobs: int
    period: float
    window: float
    step: float
    delay_ms: float = 0  # each system's round trip to its servers, added (bench.delay)
    # cronchain's history: months of runs before this one, as retention keeps them
    history_months: int = 0

    def herds(self, start: float, end: float) -> dict[int, int]:
        return expected_herds(self.jobs, self.period, self.step, start, end)

    def align(self) -> None:
        """With herds, until just before the next herd's instant, so that the window
        holds whole herds."""
        if self.step:
            instant = next_instant(self.jobs, self.period, self.step, time.time() + 0.5)
            time.sleep(max(0.0, instant - 0.25 - time.time()))

    @property
    def steady_lag(self) -> float:
        """How late the last fires may be for the window to start (``settle``). A herd
        takes seconds to drain by nature. A spread load in its steady state starts every
        fire within about 0.1 s, and a second is not yet steady: a fleet of dependent
        jobs ends its first period with a burst of released runs, and its ticks start
        110-300 ms late for some 6 s after its lags are under a second (docs/benchmarks-archive.md,
        twelfth round)."""
        return 1.0 if self.step else 0.25

    @property
    def drain_wait(self) -> float:
        """How long after the window its herds are followed to their last start."""
        return max(30.0, self.period)


@dataclass
class Run:
    fires: int
    lags: list[float]
    worker_cpu: float  # every worker's
    other_cpu: float  # beat's process (bare: the benchmark's thread that sends the herds)
    peak_rss: int
    warmup: float  # seconds until steady state
    herds: HerdTally
    transactions: int | None = None
    paths: dict[str, tuple[float, int]] = field(default_factory=dict)  # CPU, peak RSS
    died: list[str] = field(default_factory=list)  # processes that exited during the run
    machine: MachineCpu | None = None  # cronchain's: its CPU, and the rest of the machine's
    sent_late: float | None = None  # bare: the latest a herd was queued after its instant
    # The round trips measured as the system makes them, by server, in ms; with
    # --delay-ms, through the proxies, whose CPU is the network's, not the system's.
    round_trips: dict[str, float] = field(default_factory=dict)
    network_cpu: float = 0.0

    @property
    def sustained(self) -> bool:
        """Every fire recorded once and started, p99 under ``SUSTAINED_P99``, no process
        exited."""
        herds = self.herds.every_fire_recorded and not self.herds.incomplete
        p99 = percentile(self.lags, 0.99)
        return herds and p99 < SUSTAINED_P99 and not self.died


def run_cronchain(
    folder: Path,
    load: Load,
    requires: bool = False,
    events: str | None = None,
    code: str | None = None,
) -> Run:
    """``code``: the ``PYTHONPATH`` of other code to deploy (``--baseline``)."""
    settings = {"CRONCHAIN_RUN_EVENTS": "false"} if events == "celery" else {}
    with deployment(folder, delay_ms=load.delay_ms, code=code, **settings) as d:
        db, c = d.db, d.cluster
        if load.history_months:  # made before the workers run (history_partitions)
            history_partitions(db, datetime.now(UTC), load.history_months)
        # The workers run before the jobs exist: each job's first slot comes after its
        # creation, so none is overdue when it starts (no startup backlog to drain).
        # WARNING, as the baseline's worker: INFO writes two lines per task.
        d.start(loglevel="WARNING")
        d.wait_ready()
        if events is not None:  # as Flower does as it starts
            Celery(broker=d.redis.url).control.enable_events()
        d.apply(job_document(load.jobs, load.period, load.step, requires=requires), timeout=120)
        history_runs(db, datetime.now(UTC), load.history_months, HISTORY_RUNS)

        try:
            ready = (lambda: first_waits_over(db)) if requires else (lambda: True)
            warmup = settle(lambda: recent_lags(db), load.period, ready, load.steady_lag)
            analyze(db)  # the runs of the warm-up are in the history now
            load.align()
            pids = {**d.worker_pids, "beat": c.processes["beat"].pid, **proxies(d.delays)}
            trips = round_trips(c.env["CRONCHAIN_BROKER_URL"], c.env["CRONCHAIN_DATABASE_URL"])
            with (
                PeakRss(pids["worker"]) as control_rss,
                PeakRss(pids["work"]) as work_rss,
                MachineCpu(db, frozenset(d.delays.pids)) as machine,
            ):
                x0 = transactions(db)
                t0, t1, cpu = measure(pids, load.window)
                x1 = transactions(db)
            expected = load.herds(t0, t1)
            observed = wait_drained(
                lambda: cronchain_herds(db, t0, t1), expected, t1 + load.drain_wait
            )
            died = dead(c)
        finally:
            c.stop_all()
        start, end = (datetime.fromtimestamp(t, UTC) for t in (t0, t1))
        rows = started_runs(db, start, end)
        lags = [(r.started_at - r.slot).total_seconds() for r in rows]
        paths = {
            "control": (cpu["worker"], control_rss.peak),
            "work": (cpu["work"], work_rss.peak),
        }
        worker = cpu["worker"] + cpu["work"]
        peak = max(control_rss.peak, work_rss.peak)
        herds = HerdTally.of(expected, observed)
        run = Run(len(rows), lags, worker, cpu["beat"], peak, warmup, herds, x1 - x0, paths)
        run.died, run.machine = died, machine
        run.round_trips, run.network_cpu = trips, network_cpu(cpu)
        return run


def proxies(delays: Delays) -> dict[str, int]:
    """The delay proxies' processes, named for ``measure``."""
    return {f"proxy{n}": pid for n, pid in enumerate(delays.pids)}


def network_cpu(cpu: dict[str, float]) -> float:
    return sum(seconds for name, seconds in cpu.items() if name.startswith("proxy"))


def run_baseline(folder: Path, load: Load, system: str) -> Run:
    """Celery's beat, RedBeat, or (``bare``) no scheduler: the benchmark sends the herds."""
    with redis_server(folder) as server, delays(load.delay_ms) as delay:
        broker = delay.url(server.url)
        env = dict(
            BENCH_BROKER=broker,
            BENCH_JOBS=str(load.jobs),
            BENCH_PERIOD=f"{load.period:g}",
            BENCH_STEP=f"{load.step:g}",
        )
        c = cluster(folder, **env)
        app = [sys.executable, "-m", "celery", "-A", "bench.beat_app"]
        c.start("worker", *app, "worker", "--concurrency", "2", "--loglevel", "WARNING")
        beat = [*app, "beat", "--loglevel", "WARNING", "--schedule", str(folder / "schedule")]
        if system == "redbeat":
            beat += ["--scheduler", "redbeat.RedBeatScheduler", "--max-interval", "1"]
        if system != "bare":
            c.start("beat", *beat)
        client = server.client()

        def recent_lags() -> list[float]:
            since = time.time() - 2
            lags = []
            for record in client.lrange("bench:lags", -2000, -1):
                started, slot = map(float, record.split()[:2])
                if started >= since:
                    lags.append(started - slot)
            return lags

        def observe() -> dict:
            return baseline_herds(client.lrange("bench:lags", 0, -1), t0, t1)

        bare = system == "bare"
        sender = BareHerds(broker, load.jobs, load.period, load.step) if bare else None
        try:
            with sender or nullcontext():
                warmup = settle(recent_lags, load.period, within=load.steady_lag)
                load.align()
                pids = {name: c.processes[name].pid for name in c.processes}
                pids |= proxies(delay)
                trips = round_trips(broker)
                sent = sender.cpu if sender else 0.0
                with PeakRss(c.processes["worker"].pid) as rss:
                    t0, t1, cpu = measure(pids, load.window)
                expected = load.herds(t0, t1)
                observed = wait_drained(observe, expected, t1 + load.drain_wait)
            other = sender.cpu - sent if sender else cpu["beat"]
            died = dead(c)
        finally:
            c.stop_all()
        lags = []
        for record in client.lrange("bench:lags", 0, -1):
            started, slot = map(float, record.split()[:2])
            if t0 <= started < t1:
                lags.append(started - slot)
        herds = HerdTally.of(expected, observed)
        run = Run(len(lags), lags, cpu["worker"], other, rss.peak, warmup, herds, died=died)
        run.round_trips, run.network_cpu = trips, network_cpu(cpu)
        if sender:  # the herds' drain counts from the slot, so lateness adds to the floor
            late = [late for at, late in sender.late.items() if t0 <= at < t1]
            run.sent_late = max(late, default=float("nan"))
        return run


def dead(c: Cluster) -> list[str]:
    """The processes of ``c`` that exited before the end of the run, each with the end
    of its log on stderr (RedBeat's beat, for one, exits when a pass outlasts its lock)."""
    died = [name for name, process in c.processes.items() if process.poll() is not None]
    for name in died:
        print(f"--- {name} exited; the end of its log:", c.log(name)[-2000:], file=sys.stderr)
    return died


def report(label: str, system: str, run: Run, window: float, offered: float) -> None:
    name = f"fire_rate[{label}] {system}"
    for process in run.died:
        figure(name, f"{process}_exited_during_run", 1)
    figure(name, "offered", offered, "fires/s")
    figure(name, "warmup", run.warmup, "s")
    figure(name, "fires", run.fires / window, "fires/s")
    for q, tag in ((0.5, "p50"), (0.99, "p99")):
        figure(name, f"lag_{tag}", percentile(run.lags, q) * 1000, "ms")
    figure(name, "lag_max", max(run.lags, default=float("nan")) * 1000, "ms")
    run.herds.print_figures(name)
    figure(name, "sustained", int(run.sustained))
    if run.sent_late is not None:
        figure(name, "herd_queued_late_max", run.sent_late * 1000, "ms")
    report_costs(name, run)


def report_costs(name: str, run: Run) -> None:
    """CPU, memory and the network, per fire where that applies."""
    if run.fires:
        figure(name, "worker_cpu_per_fire", run.worker_cpu / run.fires * 1000, "ms")
        figure(name, "beat_cpu_per_fire", run.other_cpu / run.fires * 1000, "ms")
        if run.transactions is not None:
            figure(name, "transactions_per_fire", run.transactions / run.fires)
        for path, (cpu, _) in run.paths.items():
            figure(name, f"{path}_cpu_per_fire", cpu / run.fires * 1000, "ms")
    figure(name, "worker_peak_rss", run.peak_rss / 2**20, "MiB")
    for path, (_, rss) in run.paths.items():
        figure(name, f"{path}_peak_rss", rss / 2**20, "MiB")
    if run.machine is not None:  # with its PostgreSQL backends; and what else ran
        run.machine.print_figures(name, run.fires)
    for server, trip in run.round_trips.items():
        figure(name, f"{server}_round_trip", trip, "ms")
    if run.network_cpu and run.fires:
        figure(name, "network_cpu_per_fire", run.network_cpu / run.fires * 1000, "ms")


def run_system(system: str, load: Load, code: dict[str, str] | None = None) -> Run:
    """``code``: the ``PYTHONPATH`` of each ``cronchain@REV`` system."""
    with tempfile.TemporaryDirectory(prefix="bench-system-") as tmp:
        if system in (code or {}):
            return run_cronchain(Path(tmp), load, code=(code or {})[system])
        if system.startswith("cronchain"):
            requires = system == "cronchain+requires"
            return run_cronchain(Path(tmp), load, requires, EVENTS.get(system))
        return run_baseline(Path(tmp), load, system)


def label_of(load: Load) -> str:
    label = f"jobs={load.jobs},period={load.period:g}s"
    label += f",step={load.step:g}s" if load.step else ""
    label += f",history={load.history_months}mo" if load.history_months else ""
    return label + (f",delay={load.delay_ms:g}ms" if load.delay_ms else "")


def run_load(
    systems: list[str], load: Load, code: dict[str, str] | None = None, repeat: int = 1
) -> None:
    """Each system in turn on the same load (``repeat`` times over), then the ``herd``
    line, and with a baseline the ``ab`` line."""
    label, tallies, p99 = label_of(load), {}, {}
    runs: dict[str, list[Run]] = {system: [] for system in systems}
    for _ in range(repeat):
        for system in systems:
            run = run_system(system, load, code)
            report(label, system, run, load.window, load.jobs / load.period)
            runs[system].append(run)
            tallies[system] = run.herds
            p99[system] = percentile(run.lags, 0.99)
    for baseline in code or {}:
        if "cronchain" in runs:
            print_ab(f"fire_rate[{label}] ab", runs["cronchain"], runs[baseline])
    if {"cronchain", "cronchain+requires"} <= set(p99):
        ratio = p99["cronchain+requires"] / p99["cronchain"]
        figure(f"fire_rate[{label}] requires", "p99_over_plain", ratio)
    if load.step:
        print_comparison(f"fire_rate[{label}] herd", tallies)


def print_ab(name: str, current: list[Run], baseline: list[Run]) -> None:
    """The current code's mean costs over the baseline's, each run weighted by its fires."""

    def mean(runs: list[Run], cost: Callable[[Run], float]) -> float:
        return sum(cost(r) for r in runs) / max(1, sum(r.fires for r in runs))

    costs: dict[str, Callable[[Run], float]] = {
        "worker_cpu_per_fire": lambda r: r.worker_cpu,
        "control_cpu_per_fire": lambda r: r.paths["control"][0],
        "work_cpu_per_fire": lambda r: r.paths["work"][0],
    }
    for what, cost in costs.items():
        figure(name, f"{what}_ratio", mean(current, cost) / mean(baseline, cost))
    per_run: dict[str, Callable[[Run], float]] = {  # the same load: compared run by run
        "deployment_cpu": lambda r: r.machine.ours if r.machine else math.nan,
        "lag_p99": lambda r: percentile(r.lags, 0.99),
    }
    for what, value in per_run.items():
        ratio = statistics.mean(map(value, current)) / statistics.mean(map(value, baseline))
        figure(name, f"{what}_ratio", ratio)


def find_ceiling(systems: list[str], rates: list[float], load: Load) -> None:
    """Each rate, ascending, on every system still sustaining the rates below it."""
    tried: dict[str, dict[float, bool]] = {system: {} for system in systems}
    for rate in sorted(rates):
        for system in systems:
            if not all(tried[system].values()):
                continue
            rated = replace(load, jobs=round(rate * load.period))
            run = run_system(system, rated)
            report(label_of(rated), system, run, rated.window, rated.jobs / rated.period)
            tried[system][rate] = run.sustained
    name = f"fire_rate[ceiling,period={load.period:g}s"
    name += f",step={load.step:g}s" if load.step else ""
    name += f",delay={load.delay_ms:g}ms]" if load.delay_ms else "]"
    for system, results in tried.items():
        for rate, sustained in results.items():
            figure(f"{name} {system}", f"rate_{rate:g}_sustained", int(sustained))
        ceiling = max((rate for rate, ok in results.items() if ok), default=0)
        figure(f"{name} {system}", "ceiling", ceiling, "fires/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fire_rate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--period", type=float, default=10)
    parser.add_argument(
        "--window", type=float, help="seconds measured (default: 40, or three steps if longer)"
    )
    parser.add_argument("--systems", help=f"default: {','.join(SYSTEMS)}")
    parser.add_argument(
        "--step", type=float, default=0, help="slots on multiples of this many seconds (1: cron)"
    )
    parser.add_argument(
        "--rates",
        help="offered fires/s to try, comma-separated: the ceiling of each system "
        f"(default systems: {','.join(CEILING_SYSTEMS)})",
    )
    parser.add_argument(
        "--baseline", metavar="REV", help="also deploy the code at this git revision"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the systems in turn this many times"
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=0,
        help="a round trip this long between every system and its servers (bench.delay)",
    )
    parser.add_argument(
        "--history-months",
        type=int,
        default=0,
        help=f"cronchain's history: this many months before this one, each holding"
        f" {HISTORY_RUNS} runs of each job (5: about the 180 days a deployment keeps by"
        " default); 0: a new deployment's, none",
    )
    args = parser.parse_args(argv)
    systems = (args.systems or ",".join(CEILING_SYSTEMS if args.rates else SYSTEMS)).split(",")
    for system in systems:
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}; use {', '.join(SYSTEMS)}")
    if args.baseline and "cronchain" in systems:
        systems.insert(systems.index("cronchain") + 1, f"cronchain@{args.baseline}")
    if args.rates and (args.baseline or args.repeat > 1):
        parser.error("--baseline and --repeat are for one load, not --rates")
    window = args.window if args.window is not None else max(40.0, 3 * args.step)
    load = Load(args.jobs, args.period, window, args.step, args.delay_ms, args.history_months)
    with tempfile.TemporaryDirectory(prefix="bench-code-") as tmp:
        code = {}
        with previous_code(args.baseline, Path(tmp)) if args.baseline else nullcontext() as path:
            if path is not None:
                code[f"cronchain@{args.baseline}"] = path
            if args.rates:
                find_ceiling(systems, [float(r) for r in args.rates.split(",")], load)
            else:
                run_load(systems, load, code, args.repeat)


if __name__ == "__main__":
    main()
