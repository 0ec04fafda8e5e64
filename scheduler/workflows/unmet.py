"""``on_unmet``: what becomes of a slot that may wait for its upstreams or its gates no
longer (``scheduler.workflows.upstream``, ``scheduler.workflows.gates``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronchain.scheduler import debuglog
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import InvocationStatus as S
from cronchain.statemachine import Reason


def settle(
    job: JobRow, inv: InvocationRow, reason: Reason, error: str, now: datetime
) -> tuple[dict[str, Any], Outcome | None]:
    """The columns to write (its log; or its end, SKIPPED or FAILED with ``reason`` and
    ``error``) and how the run ends: None if it starts all the same (``on_unmet:
    run``). Its end is the caller's to hand to ``runs.finished``, which raises what
    alerts it raises."""
    on_unmet = controls_of(job).on_unmet
    if on_unmet == "run":
        return {
            "log": debuglog.append(inv.log, now, f"starts anyway (on_unmet: run): {error}")
        }, None
    status = S.FAILED if on_unmet == "fail" else S.SKIPPED
    ended = dict(
        status=status.value,
        reason=reason,
        error=error,
        finished_at=now,
        deadline=None,
        log=debuglog.append(inv.log, now, f"{status.value}: {error}"),
    )
    return ended, Outcome(status, error, reason)


def unreleased(hold: str, status: str, reason: str | None, started: bool) -> str:
    """How a wait for ``hold`` (``upstream``, ``gate``, ``pool``) that released nothing
    ended, in words: the run still waits for it; it went on as ``on_unmet: run`` says
    (started, or waits for the next hold: its reason is that one's); or it ended
    without a start (``on_unmet``, an abort)."""
    if status == S.WAITING.value and reason == hold:
        return "still waiting"
    if started:
        return "not met; started anyway (on_unmet: run)"
    if status == S.WAITING.value:
        return f"not met; went on (on_unmet: run), now waits for its {reason}"
    return f"not met: {status}"
