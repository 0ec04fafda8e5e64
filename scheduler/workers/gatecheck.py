"""The work path's side of ``gates``: take a check, ask the gate, record its answer.

An ``http`` gate is asked here, with the ``http`` kind's invoker (its network guard,
deadline and redaction), and its answer recorded at once. A ``celery`` gate's task is
sent to the user's queue with a ``cronchain_gate`` header; the hooks on the worker that
runs it record what it returned (:mod:`scheduler.workers.hooks`).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from scheduler import gates
from scheduler.engine import Engine
from scheduler.workers.work import make_call

log = logging.getLogger("cronchain.work")
HEADER = "cronchain_gate"


def check(
    engine: Engine, app: Celery, invocation_id: int, index: int, number: int, job_id: int
) -> None:
    claimed = gates.claim(engine, invocation_id, index, number, job_id)
    if claimed is None:
        log.info(
            "invocation %s gate %s check %s: not waiting, or taken", invocation_id, index, number
        )
        return
    job, gate, following = claimed
    engine.send(following)  # the next check is asked even if this one never answers
    if "celery" in gate:
        _send_task(
            app,
            gate["celery"],
            {"invocation": invocation_id, "gate": index, "check": number, "job": job_id},
        )
        return
    if "http" in gate:
        call = gates.http_call(job, invocation_id, number, gate)
        yes, said = gates.answer_of(make_call(engine.invokers.get("http"), call))
    else:  # the job no longer declares it
        yes, said = True, "no longer a gate of the job"
    gates.answer(engine, invocation_id, index, number, job_id, yes, said)


def _send_task(app: Celery, options: dict[str, Any], header: dict[str, int]) -> None:
    app.send_task(
        options["task"],
        args=options["args"],
        kwargs=options["kwargs"],
        queue=options["queue"],
        headers={HEADER: header},
    )
