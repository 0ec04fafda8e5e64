"""What a deployment costs with nothing to do: the CPU its processes spend with no jobs.

    python -m bench.idle [--seconds 30]

A deployment as ``cronchain up`` runs it (control worker, work worker, beat, on a
private Redis and a fresh database, no jobs) is left to settle for 10 s, then each
process tree's CPU is read over ``--seconds``. It tells the fires' own cost from the
workers' idling in ``bench.fire_rate``'s spread load, whose worker CPU per fire counts
both. Figures, in cores: ``control``, ``work``, ``beat``, and ``all`` of them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import deployment, figure, measure

NAME = "idle"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, deployment(Path(folder)) as d:
        d.start(loglevel="WARNING")
        d.wait_ready()
        time.sleep(10)  # past the workers' start-up work
        pids = {
            "control": d.worker_pids["worker"],
            "work": d.worker_pids["work"],
            "beat": d.cluster.processes["beat"].pid,
        }
        _, _, spent = measure(pids, args.seconds)
    cores = {name: seconds / args.seconds for name, seconds in spent.items()}
    for name, used in cores.items():
        figure(NAME, name, used, "cores")
    figure(NAME, "all", sum(cores.values()), "cores")


if __name__ == "__main__":
    main()
