"""The benchmarks page's table (docs/benchmarks.md), measured in one run on one machine:
each load on cronchain and on its peers (RedBeat, Celery beat, a bare Celery app), one
after the other, printed as Markdown rows with the command that measures each row.

    python -m bench.table [--quick] > /tmp/table.md

Each load is ``bench.fire_rate`` (or ``bench.slow_runs``, ``bench.slow_calls``) run as a
command of its own, as a reader would run it; this only reads their figure lines.
``--quick`` runs each load smaller, to try the table's plumbing (its figures are not the
page's).
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.common import ROOT

SYSTEMS = "cronchain,redbeat,bare,beat"


@dataclass(frozen=True)
class Load:
    name: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    module: str = "bench.fire_rate"


LOADS = (
    Load(
        "1,000 jobs every 10 s, spread over the period (100 fires/s)",
        ("--jobs", "1000", "--period", "10", "--systems", SYSTEMS),
        ("--jobs", "200", "--period", "10", "--window", "20", "--systems", SYSTEMS),
    ),
    Load(
        "10,000 jobs due at the same second, every minute (`0 * * * *` at scale)",
        ("--jobs", "10000", "--period", "60", "--step", "60", "--systems", SYSTEMS),
        ("--jobs", "1000", "--period", "20", "--step", "20", "--systems", SYSTEMS),
    ),
    Load(
        "1,000 no-op jobs beside 50 whose HTTP calls take 5 s, every 10 s",
        ("--no-check",),
        ("--fast", "200", "--slow", "10", "--window", "20", "--no-check"),
        "bench.slow_runs",
    ),
    Load(
        "1,000 http jobs due at one instant, whose calls take 2 s, on one work worker",
        ("--no-check",),
        ("--jobs", "200", "--period", "30", "--no-check"),
        "bench.slow_calls",
    ),
)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def figures(module: str, args: tuple[str, ...]) -> tuple[dict[str, str], bool]:
    """``{"bench name": "value unit"}`` of one command's figure lines, and whether the
    command succeeded. A line is ``bench name value [unit]``, where the bench and the
    name may hold spaces and the unit may be absent: the value is the last number."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
    found = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        at = max((i for i, part in enumerate(parts) if i >= 2 and _number(part)), default=None)
        if at is not None:
            found[" ".join(parts[:at])] = " ".join(parts[at:])
    return found, done.returncode == 0


def _ms(value: str | None) -> str:
    if value is None:
        return "—"
    number = float(value.split()[0])
    if math.isinf(number):  # a herd never drained
        return "never"
    return "—" if math.isnan(number) else f"{number:,.0f} ms"


def fire_rate_rows(seen: dict[str, str], args: tuple[str, ...]) -> list[str]:
    rows = []
    for system in SYSTEMS.split(","):
        named = re.compile(rf"^(fire_rate\[[^\]]*\] {re.escape(system)}) ")
        prefixes = {m.group(1) for key in seen if (m := named.match(key))}
        if len(prefixes) != 1:
            rows.append(f"| | {system} | did not run (see its log) | | | | |")
            continue
        [prefix] = prefixes

        def get(name: str, prefix: str = prefix) -> str | None:
            return seen.get(f"{prefix} {name}")

        fires, offered = (float((get(n) or "nan").split()[0]) for n in ("fires", "offered"))
        rate = f"{fires:,.0f} of {offered:,.0f}/s"
        if get("sustained") == "0" and "--step" not in args:  # a herd's lag is its drain
            rate += ", not sustained"
        if any(key.startswith(prefix) and key.endswith("_exited_during_run") for key in seen):
            rate += ", a process exited"
        drain = get("drain_max") if "--step" in args else None  # only herds drain
        rows.append(
            f"| | {system} | {rate} | {_ms(get('lag_p50'))} | {_ms(get('lag_p99'))}"
            f" | {_ms(drain)} | {get('worker_cpu_per_fire') or '—'} |"
        )
    return rows


# slow_runs' groups, as the table names them (the fast jobs alone are its baseline).
_GROUPS = {
    "baseline fast": "cronchain, the no-op jobs alone",
    "mixed fast": "cronchain, the no-op jobs beside the slow",
    "mixed slow": "cronchain, the slow jobs",
}


def slow_runs_rows(seen: dict[str, str], args: tuple[str, ...]) -> list[str]:
    rows = []
    for group, shown in _GROUPS.items():
        named = re.compile(rf"^slow_runs\[[^\]]*\] {group} (lag_p50|lag_p99)$")
        lags = {m.group(1): value for key, value in seen.items() if (m := named.match(key))}
        if lags:
            rows.append(
                f"| | {shown} | | {_ms(lags.get('lag_p50'))} | {_ms(lags.get('lag_p99'))} | — | — |"
            )
    return rows


# slow_calls' runs, as the table names them (the previous code is its baseline).
_ARMS = {
    "current": "cronchain, calls on the event loop",
    "baseline": "cronchain before (`4162c2e`), calls on 100 threads",
}


def _in_ms(seconds: str | None) -> str | None:
    return None if seconds is None else str(float(seconds.split()[0]) * 1000)


def slow_calls_rows(seen: dict[str, str], args: tuple[str, ...]) -> list[str]:
    """A run's calls as a herd: its lag is a call's arrival at the endpoint, its drain
    the last arrival; the last outcome recorded follows in the fires column."""
    rows = []
    for arm, shown in _ARMS.items():
        named = re.compile(rf"^(slow_calls\[[^\]]*\] {arm}) jobs$")
        [prefix] = [m.group(1) for key in seen if (m := named.match(key))] or [None]
        if prefix is None:
            rows.append(f"| | {shown} | did not run (see its log) | | | | |")
            continue

        def get(name: str, prefix: str = prefix) -> str | None:
            return seen.get(f"{prefix} {name}")

        finish = float((get("finish_max") or "nan").split()[0])
        made = f"{get('started')} of {get('jobs')} calls made, the last recorded at {finish:.1f} s"
        p50, p99, last = (_ms(_in_ms(get(f"start_{q}"))) for q in ("p50", "p99", "max"))
        rows.append(f"| | {shown} | {made} | {p50} | {p99} | {last} | — |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.table", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller loads, to try it")
    quick = parser.parse_args().quick
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(f"Measured {datetime.now(UTC):%Y-%m-%d} at `{rev}`, {platform.python_version()}.\n")
    print("| load | system | fires | lag p50 | lag p99 | herd drained | worker CPU per fire |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    for load in LOADS:
        args = load.quick if quick else load.args
        command = f"`python -m {load.module} {' '.join(args)}`"
        name = "(quick)" if quick else load.name
        print(f"| **{name}**: {command} | | | | | | |", flush=True)
        seen, ran = figures(load.module, args)
        failed = failed or not ran
        rows = {"bench.slow_runs": slow_runs_rows, "bench.slow_calls": slow_calls_rows}.get(
            load.module, fire_rate_rows
        )
        for row in rows(seen, args):
            print(row, flush=True)
    if failed:
        sys.exit("a benchmark failed (its stderr is above): the table is incomplete")


if __name__ == "__main__":
    main()
