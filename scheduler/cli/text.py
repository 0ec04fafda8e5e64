"""What the command line prints: JSON, or text for a person (tables, one invocation)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cronchain.scheduler.outside import one_line, shown_on_a_terminal
from cronchain.scheduler.queries.forecast import SHOWN, Forecast, repeated, when
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.workflows import gates, upstream
from cronchain.scheduler.workflows.unmet import unreleased


def show(rows: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(text(rows))


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[one_line(str("" if r[c] is None else r[c])) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [columns, *cells]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _not_released(d: dict[str, Any], hold: str) -> str:
    """The end of a wait for ``hold`` that released nothing (``unmet.unreleased``), with
    when the run started or ended."""
    words = unreleased(hold, d["status"], d["reason"], d["started_at"] is not None)
    if d["started_at"] is not None:
        return f"not met; started anyway at {d['started_at']} (on_unmet: run)"
    if words.startswith("not met: "):
        return f"{words} at {d['finished_at']}"
    return words


def invocation_text(d: dict[str, Any]) -> str:
    keys = [
        "id",
        "job",
        "slot",
        "trigger_id",
        "status",
        "reason",
        "attempt",
        "worker",
        "started_at",
        "finished_at",
        "start_at",
        "deadline",
        "timeout_at",
        "error",
        "revision",
    ]
    lines = [f"{k}: {one_line(str(d[k]))}" for k in keys if d[k] is not None]
    checks = d.get("checks") or {}
    if checks.get("held_at"):
        until = checks.get("released_at") or _not_released(d, upstream.REASON)
        if checks.get("released_at") and not all(c["met"] for c in checks.get(upstream.REASON, ())):
            until = f"not met; started anyway at {checks['released_at']} (on_unmet: run)"
        lines.append(f"waited for upstreams: {checks['held_at']} -> {until}")
    lines += [f"upstream {upstream.said(c)}" for c in checks.get(upstream.REASON, ())]
    if gates.REASON in checks:
        state = checks[gates.REASON]
        until = state.get("released_at") or _not_released(d, gates.REASON)
        lines.append(f"waited for gates: {state['since']} -> {until}")
        for gate in state["gates"]:
            lines += gates.answers_said(gate)
    for a in d["attempts"]:
        reason = f" ({a['reason']})" if a.get("reason") else ""
        lines.append(
            f"attempt {a['attempt']}: {a['status']}{reason} {a['started_at']} -> "
            f"{a['finished_at']}: {a['error']}"
        )
    text = "\n".join([*lines, "log:", d["log"].rstrip() or "(empty)"])
    return shown_on_a_terminal(text)


def forecast_text(ahead: Forecast) -> str:
    """The window's fires and busiest second, then each herd (once for the seconds it
    comes again) with its projects, some of its jobs and what would spread it."""
    busiest = ""
    if ahead.peak is not None:
        busiest = f"; the busiest second: {iso(ahead.peak.at)}, {ahead.peak.fires:,} fires"
    lines = [
        f"{iso(ahead.start)} to {iso(ahead.end)}: {ahead.fires:,} fires of {ahead.jobs:,}"
        f" jobs{busiest}",
        f"herds of {ahead.threshold:,} fires or more in one second: {len(ahead.herds)}",
    ]
    herds = repeated(ahead.herds)
    for herd, times in herds[:SHOWN]:
        projects = ", ".join(f"{p} {n:,}" for p, n in herd.projects.items())
        jobs = ", ".join(herd.examples) + (", ..." if herd.fires > len(herd.examples) else "")
        lines.append(f"{herd.fires:,} fires ({projects}: {jobs}) {when(times)}")
        lines += [f"  to spread it, {advice}" for advice in herd.advice]
    if len(herds) > SHOWN:
        lines.append(f"and {len(herds) - SHOWN} more herds (--json lists every one)")
    return "\n".join(lines)
