"""The work path's side of ``gates``: take a check, ask the gate, record its answer.

An ``http`` gate is asked here, with the ``http`` kind's invoker (its network guard,
deadline and redaction), and its answer recorded at once. A ``celery`` gate's task is
sent to the user's queue with a ``cronchain_gate`` header; the hooks on the worker that
runs it record what it returned (:mod:`scheduler.workers.hooks`). An answer exists only
in the process that got it: if the database is away, it is recorded patiently, as an
outcome is, since the check it answers is taken and will not be asked again.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from celery import Celery

from cronchain.scheduler.core.recording import patiently, textless_if_refused
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.workers.work import make_call
from cronchain.scheduler.workflows import gates

log = logging.getLogger("cronchain.work")
HEADER = "cronchain_gate"


def check(
    engine: Engine, app: Celery, invocation_id: int, name: str, number: int, job_id: int
) -> None:
    asked, messages = gates.claim(engine, invocation_id, name, number, job_id)
    engine.send(messages)  # the next check is asked even if this one never answers
    if asked is None:
        log.info(
            "invocation %s gate %s check %s: not waiting, taken, or not due yet (sent on)",
            invocation_id,
            name,
            number,
        )
        return
    job, gate = asked
    if "celery" in gate:
        header = {"invocation": invocation_id, "gate": name, "check": number, "job": job_id}
        _send_task(app, gate["celery"], header)
        return
    call = gates.http_call(job, invocation_id, number, gate)
    yes, said = gates.answer_of(make_call(engine.invokers.get("http"), call))
    record(engine, invocation_id, name, number, job_id, yes, said)


def record(
    engine: Engine, invocation_id: int, name: str, number: int, job_id: int, yes: bool, said: str
) -> None:
    """Record an answer that exists only in this process (``scheduler.core.recording``):
    through a database restart, and without its text if the database refuses it (a yes
    stays a yes)."""

    def answer(with_text: bool) -> None:
        told = said if with_text else "its text could not be stored"
        at = partial(gates.answer, engine, invocation_id, name, number, job_id, yes, told)
        patiently(at, f"gate {name!r} of invocation {invocation_id}")

    textless_if_refused(answer, f"gate {name!r} of invocation {invocation_id}: its answer")


def _send_task(app: Celery, options: dict[str, Any], header: dict[str, Any]) -> None:
    app.send_task(
        options["task"],
        args=options["args"],
        kwargs=options["kwargs"],
        queue=options["queue"],
        headers={HEADER: header},
    )
