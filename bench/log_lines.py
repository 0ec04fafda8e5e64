"""What ``make run`` prints in a minute (issue 35: readable logs): ``cronchain up
examples/demo.yaml`` on the embedded default, in a fresh ``CRONCHAIN_HOME``, for
``--seconds``; then its lines counted.

    python -m bench.log_lines [--seconds 60] [--show]

Figures: ``lines`` (all of stdout and stderr), ``per_minute``, ``outcomes`` (lines that
say how a run ended: the demo's three jobs end about 16 runs a minute), ``warnings``
(WARNING and above: the always-failing ``flaky`` job's runs among them) and ``other``.
``--show`` prints the log itself after the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from bench.common import figure
from tests.support.repo import ROOT

NAME = "log_lines"
# An outcome line: "demo/ping 2026-...Z attempt 1 SUCCEEDED in 0.002 s" (and the older
# "demo/ping 2026-...: SUCCEEDED").
OUTCOME = re.compile(r"demo/\w+ .*(SUCCEEDED|FAILED|ABORTED|SKIPPED)")
WARNING = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|\"level\": \"(WARNING|ERROR)")


def main() -> None:
    args = _arguments()
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
        env |= {"CRONCHAIN_HOME": home, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "cronchain.scheduler.cli", "up", "examples/demo.yaml"]
        with open(os.path.join(home, "log"), "w+") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            time.sleep(args.seconds)
            process.send_signal(signal.SIGINT)
            process.wait(60)
            log.seek(0)
            lines = log.read().splitlines()
    outcomes = [line for line in lines if OUTCOME.search(line)]
    warnings = [line for line in lines if WARNING.search(line)]
    figure(NAME, "seconds", args.seconds, "s")
    figure(NAME, "lines", len(lines))
    figure(NAME, "per_minute", len(lines) * 60 / args.seconds)
    figure(NAME, "outcomes", len(outcomes))
    figure(NAME, "warnings", len(warnings))
    figure(NAME, "other", len(lines) - len(outcomes))
    figure(NAME, "exit_status", process.returncode)
    if args.show:
        print("\n".join(lines))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--show", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    main()
