"""The engine's cost per fire, in this process, with no broker: where the time goes.

    python -m bench.hot_path [--jobs 1000] [--rounds 3] [--profile]

N no-op jobs on PostgreSQL; each round moves a fake clock to the next slot and delivers
every tick in batches, as the tasks get them: a tick begins its run in its own
transaction, runs the no-op in the same process and records the outcome. Then it
delivers any start sent as a message, as a worker would. Figures: engine CPU and wall
time per fire, and database transactions per fire. ``--profile`` prints pyinstrument's
profile of the rounds (``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

from bench.common import database, figure, transactions
from scheduler.declarative import apply
from scheduler.engine import Engine
from scheduler.invokers import default_invokers
from scheduler.spec import JobSpec
from tests.conftest import Clock, RecordingPort


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hot_path", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    name = f"hot_path[jobs={args.jobs}]"
    with database() as (_, db):
        clock, port = Clock(), RecordingPort()
        engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
        specs = [
            JobSpec.from_dict("bench", {"name": f"j{i}", "schedule": "every 10s", "noop": {}})
            for i in range(args.jobs)
        ]
        apply(engine, "bench", specs)
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler()
            profiler.start()
        fires, cpu, wall, x0 = 0, time.process_time(), time.monotonic(), transactions(db)
        for _ in range(args.rounds):
            clock.advance(10)
            ticks = [(job_id, nonce) for job_id, nonce, _eta in port.ticks]
            port.clear()
            for i in range(0, len(ticks), engine.batch):  # as the tasks do, batch by batch
                engine.tick_many(ticks[i : i + engine.batch], start_here=True)
            starts, port.starts[:] = list(port.starts), []
            for invocation_id in starts:
                engine.start_invocation(invocation_id)
            fires += len(ticks)  # each tick fires its slot
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        time.sleep(1.1)  # the statistics collector's delay
        figure(name, "engine_cpu_per_fire", cpu / fires * 1000, "ms")
        figure(name, "wall_per_fire", wall / fires * 1000, "ms")
        figure(name, "transactions_per_fire", (transactions(db) - x0) / fires)
        if profiler is not None:
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    main()
