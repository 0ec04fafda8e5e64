"""The ``celery`` kind: a job's own task, sent to its own queue for the user's workers.

The attempt travels in a ``cronchain`` header, which the hooks installed on those
workers (:mod:`scheduler.workers.hooks`) read to claim it before the task body runs.
The header names the job with the invocation and the attempt: a claim, a heartbeat or an
outcome is recorded only on a run of that job. It says where the run is filed, so that
its row is found in one month of history.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from cronchain.scheduler.invokers.call import Call, message_priority
from cronchain.scheduler.spec.model import DEFAULT_PRIORITY

HEADER = "cronchain"


def send_task(app: Celery, call: Call) -> None:
    """Under the attempt's task id, so that a repeated send is one task to revoke, and
    only one of its deliveries can claim it."""
    o = call.options
    header = {
        "invocation": call.invocation_id,
        "attempt": call.attempt,
        "job": call.job_id,
        "filed": call.filed_us,  # where the run is filed: its row is found there
        "key": call.key,  # for the task's own idempotency: ids can be handed out again
        "lease": call.lease.total_seconds(),  # read by workers of cronchain 0.1
    }
    app.send_task(
        o["task"],
        args=o["args"],
        kwargs=o["kwargs"],
        queue=o["queue"],
        task_id=call.task_id,
        headers={HEADER: header},
        shadow=call.job,  # what Flower and Celery's logs name it by: the job
        # Only when the job sets them: a task's own defaults and routes apply otherwise;
        # ``celery: {priority}`` is the broker's own number, the job's is cronchain's.
        **{key: o[key] for key in ("priority", "expires") if key in o},
        **_priority(o, call, app.conf.broker_url),
    )


def _priority(options: dict[str, Any], call: Call, broker_url: str | None) -> dict[str, int]:
    """The job's priority, unless its ``celery:`` sets the broker's own number or the
    job keeps the default (the task's own default or route applies then)."""
    if "priority" in options or call.priority == DEFAULT_PRIORITY:
        return {}
    return {"priority": message_priority(call.priority, broker_url)}
