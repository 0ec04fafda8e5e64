"""``GET /healthz`` as a probe sees it (issue 35: under 100 ms at p99, Kubernetes' default
probe timeout being one second), beside the live checks it used to run on every request.

    python -m bench.health [--jobs 10000] [--probes 200]

A deployment as ``cronchain up`` runs it (control worker, work worker, beat, on a
private Redis and a fresh database with ``--jobs`` jobs firing every minute) answers a
real ``cronchain serve``. Figures, in one run:

- ``healthz_*``: ``--probes`` requests to /healthz over HTTP, one after another;
- ``live_*``: the same number of in-process ``check_health`` calls, every check asked
  then (a broadcast to the workers among them): what /healthz answered with before it
  read the workers' checks from a background thread, and what ``cronchain health`` does;
- ``livez_*``: /livez, which asks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.common import deployment, figure, percentile
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.web.health import check_health
from cronchain.scheduler.workers.runtime import sending_app
from tests.support.repo import ROOT
from tests.support.services import free_port
from tests.support.wait import wait_until

NAME = "health"


def main() -> None:
    args = _arguments()
    with tempfile.TemporaryDirectory() as folder, deployment(Path(folder)) as d:
        d.apply_jobs(args.jobs, period=60)
        d.start(loglevel="WARNING")
        d.wait_ready()
        figure(NAME, "jobs", args.jobs)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--port", str(port)],
            env=dict(d.cluster.env, PYTHONPATH=str(ROOT)),
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: _healthy(f"{base}/healthz"), 60, "serve to answer healthy")
            _probe(f"{base}/healthz", args.probes, "healthz")
            if _answers(f"{base}/livez"):  # not before the code that has it
                _probe(f"{base}/livez", args.probes, "livez")
            _live(d.cluster.env, args.probes)
        finally:
            server.terminate()
            server.wait(10)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())["ok"]
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return False


def _probe(url: str, count: int, name: str) -> None:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=5) as answer:
            answer.read()
        times.append((time.perf_counter() - started) * 1000)
    _figures(name, times)


def _live(env: dict[str, str], count: int) -> None:
    os.environ.update(env)
    settings = Settings.from_env()
    db = make_engine(settings.database_url)
    app = sending_app()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        check_health(db, app, settings)
        times.append((time.perf_counter() - started) * 1000)
    _figures("live", times)


def _figures(name: str, times: list[float]) -> None:
    figure(NAME, f"{name}_p50", percentile(times, 0.5), "ms")
    figure(NAME, f"{name}_p99", percentile(times, 0.99), "ms")
    figure(NAME, f"{name}_max", max(times), "ms")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=200)
    return parser.parse_args()


if __name__ == "__main__":
    main()
