"""The engine's port onto Celery: sends cronchain's tasks by name.

By name, so that ``scheduler`` never imports the task modules (``tasks`` imports
``scheduler``, not the other way round).
"""

from __future__ import annotations

from datetime import datetime

from celery import Celery

from scheduler.invokers import Call
from scheduler.invokers.celery import send_task


class CeleryPort:
    """Sends ``tick_later``/``tick_batch``/``start_invocation`` on the control path, and
    each attempt to the worker that will run it."""

    def __init__(self, app: Celery, queue: str, work_queue: str = "cronchain.work"):
        self.app = app
        self.queue = queue
        self.work_queue = work_queue

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

    def run(self, call: Call) -> None:
        """A ``celery`` attempt is the job's own task; any other kind's is
        ``cronchain.run`` on the work path. Under the attempt's task id, so that a repeated
        send is one task to revoke, and only one of its deliveries can claim it."""
        if call.kind != "celery":
            self.app.send_task(
                "cronchain.run",
                args=(call.invocation_id, call.attempt, call.job_id),
                queue=self.work_queue,
                task_id=call.task_id,
            )
            return
        send_task(self.app, call)

    def run_batch(self, calls: list[Call]) -> None:
        self.app.send_task(
            "cronchain.run_batch",
            args=([[call.invocation_id, call.attempt, call.job_id] for call in calls],),
            queue=self.work_queue,
        )

    def revoke(self, task_id: str) -> None:
        self.app.control.revoke(task_id, terminate=True)
