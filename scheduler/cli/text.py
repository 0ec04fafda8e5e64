"""What the command line prints: JSON, or text for a person (tables, one invocation)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cronchain.scheduler.outside import one_line, shown_on_a_terminal
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
