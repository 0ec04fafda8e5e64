"""The operator's controls: ``POST /jobs/PROJECT/NAME/{pause,resume,trigger,abort}``.

Each goes through the ``Scheduler`` the CLI uses (``scheduler.api``), so the job's
machine, its change records and its history record a control from the page exactly as
one from ``cronchain pause``. Accepted only from a signed-in operator (credentials set;
``create_app`` turned away anyone without them) and only when ``scheduler.web.csrf``
believes the request came from the page; otherwise 403. After it, the browser is sent
back to the job's page (303), which says what happened. A control the job cannot take
(a paused job's trigger) answers 409 with the reason, as the CLI refuses it; a malformed
field 400; a job that is not there 404.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, abort, redirect, request, url_for

from cronchain.scheduler.errors import CronchainError, NotFound, SpecError, TransientError
from cronchain.scheduler.storage import pages
from cronchain.scheduler.web import csrf
from cronchain.scheduler.web.context import context
from cronchain.statemachine import InvalidTransition

ACTIONS = ("pause", "resume", "trigger", "abort")
MAX_REASON = 500  # characters of a pause reason kept


def register(app: Flask) -> None:
    app.add_url_rule("/jobs/<project>/<name>/<action>", "control", control, methods=["POST"])


def control(project: str, name: str, action: str) -> Response:
    ctx = context()
    if ctx.credentials is None:
        abort(403, "read-only: cronchain serve runs without credentials (--basic-auth)")
    refused = csrf.refusal(request, ctx.credentials)
    if refused is not None:
        abort(403, refused)
    if action not in ACTIONS:
        abort(404, f"no control {action!r}")
    with ctx.db.connect() as conn:
        if pages.job_line(conn, project, name) is None:
            abort(404, f"no job {project}/{name}")
    ref = f"{project}/{name}"
    try:
        done = _act(action, ref)
    except NotFound as err:  # deleted meanwhile
        abort(404, str(err))
    except SpecError as err:  # a malformed form field (a pause reason with a NUL)
        abort(400, str(err))
    except TransientError as err:  # the database is away: try again
        abort(503, str(err))
    except (CronchainError, InvalidTransition) as err:  # refused, as the CLI refuses it
        abort(409, refusal(ref, action, err))
    target = url_for("job", project=project, name=name, **done)
    return redirect(target, 303)  # type: ignore[return-value]


# What to do about a refusal, by the state that refused it (statemachine.JobState).
NEXT_STEP = {
    "SUSPENDED": "It is paused: resume it first.",
    "DISABLED": "It is not in its job file any more: apply a file that has it to run it.",
}
PAST = {"pause": "paused", "resume": "resumed", "trigger": "triggered", "abort": "aborted"}


def refusal(ref: str, action: str, err: Exception) -> str:
    """A refusal as a sentence: what was not done, why (the CLI's words), and what to
    do instead where the job's state says."""
    state = getattr(getattr(err, "state", None), "value", None)
    then = f" {NEXT_STEP[state]}" if state in NEXT_STEP else ""
    return f"{ref} was not {PAST[action]}: {str(err).rstrip('.')}.{then}"


def _act(action: str, ref: str) -> dict[str, Any]:
    """Do ``action`` to the job as the CLI does; what the job page then says."""
    scheduler = context().scheduler
    match action:
        case "pause":
            reason = request.form.get("reason", "").strip()[:MAX_REASON] or None
            scheduler.pause(ref, reason)
            return {"done": "paused"}
        case "resume":
            scheduler.resume(ref, catch_up=request.form.get("catch_up") == "on")
            return {"done": "resumed"}
        case "trigger":
            made = scheduler.trigger(ref)
            done = made["result"]
            if done == "waiting":  # for its upstreams, its gates or its pool: say which
                done = f"waiting_{made['waiting']}"
            return {"done": done, "n": made["invocation"]}
        case "abort":
            aborted = scheduler.abort(ref)
            return {"done": "aborted", "n": sum(len(ids) for ids in aborted.values())}
    raise AssertionError(action)  # ACTIONS was checked
