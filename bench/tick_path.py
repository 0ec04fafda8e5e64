"""A tick's path through the package, module by module: how one batch of ticks travels.

    python -m bench.tick_path [--jobs 20] [--kind both|batch|single] [--sequence]

N no-op jobs on PostgreSQL share a slot; the clock moves to it, and the control path's
``Engine.tick_many`` takes their ticks in one batch (``batch``: as the worker's task
does, each run begun in its tick's transaction) or one tick alone (``single``). Every
call between two of cronchain's modules is recorded (``sys.setprofile``), and printed:

- ``modules``: how many of cronchain's modules the path enters (each package of
  ``PARTS`` counted as one);
- ``returns``: the moves (from one module to another) by which it comes back to a module
  it had left for another;
- ``climbs``: the calls (from one module to another) from a lower layer into a higher one
  (``LAYERS``, from the job machine up to the engine), against the dependencies.

Moves and calls are counted once each, however many ticks repeat them: these are the
path's shape, the same for a batch of 20 and of 500.

The goal of issue 36 is one pass down the layers: no climb, few returns. The sequence of
modules (consecutive calls within one module collapsed) is printed with ``--sequence``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any

from bench.common import database, figure
from cronchain.scheduler.declare.apply import apply
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.workers import work
from tests.support.engine import Clock, RecordingPort

PACKAGE = "cronchain."
# From the bottom up: a module's layer is that of the longest prefix listed here.
LAYERS = (
    ("cronchain.statemachine",),
    ("cronchain.scheduler.timing", "cronchain.scheduler.errors", "cronchain.scheduler.debuglog"),
    ("cronchain.scheduler.storage",),
    (
        "cronchain.scheduler.core.effects",
        "cronchain.scheduler.spec.controls",
        "cronchain.scheduler.spec.jobspec",
        "cronchain.scheduler.invokers",
        "cronchain.scheduler.outside",
    ),
    ("cronchain.scheduler.core.stepping",),
    # The core: it calls the features above through their protocols (scheduler.core.host),
    # which the features implement; a call from here into one of them counts as a
    # climb, though no import goes that way.
    (
        "cronchain.scheduler.core.host",
        "cronchain.scheduler.core.admission",
        "cronchain.scheduler.core.attempts",
        "cronchain.scheduler.core.runs",
        "cronchain.scheduler.core.outcome_batch",
        "cronchain.scheduler.core.leases",
    ),
    ("cronchain.scheduler.core.actions",),
    ("cronchain.scheduler.core.tick_batch",),
    ("cronchain.scheduler.core",),
    (
        "cronchain.scheduler.workflows.gates",
        "cronchain.scheduler.workflows.upstream",
        "cronchain.scheduler.workflows.upstream_waits",
        "cronchain.scheduler.workflows.pools",
        "cronchain.scheduler.workflows.backfill",
        "cronchain.scheduler.alerts",
        "cronchain.scheduler.workflows.unmet",
        "cronchain.scheduler.workflows.triggers",
    ),
    ("cronchain.scheduler.engine",),  # the core with the features plugged in
)


def layer(module: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


# Packages counted as one part: their modules are one layer, and a call between two of
# them is not a move of the path (the job machine's value types, storage's rows).
PARTS = tuple(
    f"cronchain.{p}"
    for p in (
        "statemachine",
        "scheduler.storage",
        "scheduler.timing",
        "scheduler.alerts",
        "scheduler.invokers",
    )
)


def part(module: str) -> str:
    return next((p for p in PARTS if module == p or module.startswith(p + ".")), module)


def traced(action: Callable[[], None]) -> list[tuple[str, str]]:
    """The (caller, callee) part of every call between two of cronchain's parts."""
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee = part(frame.f_globals.get("__name__", ""))
        caller = part(frame.f_back.f_globals.get("__name__", ""))
        if callee.startswith(PACKAGE) and caller.startswith(PACKAGE) and callee != caller:
            calls.append((caller, callee))

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def path_of(calls: list[tuple[str, str]], start: str) -> list[str]:
    """The modules in the order the path is in them (a call and its return each move it)."""
    sequence = [start]
    for caller, callee in calls:
        if sequence[-1] != caller:
            sequence.append(caller)  # back in the caller, after the callee returned
        sequence.append(callee)
    return sequence


def returns(sequence: list[str]) -> int:
    seen: set[str] = set()
    moves: set[tuple[str, str]] = set()
    for before, module in zip(sequence, sequence[1:], strict=False):
        seen.add(before)
        if module != before and module in seen:
            moves.add((before, module))
    return len(moves)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tick_path", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--kind", choices=("both", "batch", "single"), default="both")
    parser.add_argument("--sequence", action="store_true", help="print the path itself")
    args = parser.parse_args(argv)
    kinds = ("batch", "single") if args.kind == "both" else (args.kind,)
    with database() as (_, db):
        clock, port = Clock(), RecordingPort()
        engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
        specs = [JobSpec("bench", f"j{i}", "every 10s") for i in range(args.jobs)]
        apply(engine, "bench", specs)
        engine.tick_many([(0, 0)])  # warm: modules imported, statements compiled
        for kind in kinds:
            for call in port.runs:  # the last kind's runs end: this kind's tick starts one
                work.execute(engine, call.invocation_id, call.attempt, "bench")
            clock.advance(10)
            ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
            port.clear()
            ticks = ticks if kind == "batch" else ticks[:1]
            calls = traced(lambda t=ticks: engine.tick_many(t, start_here=True))
            sequence = path_of(calls, "cronchain.scheduler.engine")
            name = f"tick_path[{kind},jobs={len(ticks)}]"
            figure(name, "modules", len(set(sequence)))
            figure(name, "returns", returns(sequence))
            figure(name, "climbs", len({(a, b) for a, b in calls if layer(a) < layer(b)}))
            if args.sequence:
                short = [m.removeprefix("cronchain.scheduler.") for m in sequence]
                collapsed = [m for i, m in enumerate(short) if i == 0 or m != short[i - 1]]
                print(" > ".join(collapsed))
                for a, b in sorted({(a, b) for a, b in calls if layer(a) < layer(b)}):
                    print(f"climb: {a} -> {b}")


if __name__ == "__main__":
    main()
