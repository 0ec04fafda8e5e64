"""The engine's port onto Celery: sends cronchain's tasks by name.

By name, so that ``scheduler`` never imports the task modules (``tasks`` imports
``scheduler``, not the other way round).
"""

from __future__ import annotations

from datetime import datetime

from celery import Celery

from scheduler.invokers import Call


class CeleryPort:
    """Sends ``tick_later``/``tick_batch``/``start_invocation`` and a ``celery`` job's own task."""

    def __init__(self, app: Celery, queue: str):
        self.app = app
        self.queue = queue

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self.app.send_task("cronchain.tick_later", args=(job_id, nonce), eta=eta, queue=self.queue)

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None:
        self.app.send_task("cronchain.tick_batch", args=(ticks,), eta=eta, queue=self.queue)

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None:
        self.app.send_task(
            "cronchain.start_invocation", args=(invocation_id, attempt), eta=eta, queue=self.queue
        )

    def send_task(self, call: Call) -> None:
        """The job's own task, with the attempt in a header for the worker side to claim."""
        o = call.options
        header = {
            "invocation": call.invocation_id,
            "attempt": call.attempt,
            "lease": call.lease.total_seconds(),
        }
        self.app.send_task(
            o["task"],
            args=o["args"],
            kwargs=o["kwargs"],
            queue=o["queue"],
            task_id=call.task_id,
            headers={"cronchain": header},
        )

    def revoke(self, task_id: str) -> None:
        self.app.control.revoke(task_id, terminate=True)
