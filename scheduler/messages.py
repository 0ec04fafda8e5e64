"""The engine's port onto Celery: sends cronchain's tasks by name.

By name, so that ``scheduler`` never imports the task modules (``tasks`` imports
``scheduler``, not the other way round).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from celery import Celery


class CeleryPort:
    """Sends ``tick_later``/``start_invocation`` and a ``celery`` job's own task."""

    def __init__(self, app: Celery, queue: str):
        self.app = app
        self.queue = queue

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self.app.send_task("cronchain.tick_later", args=(job_id, nonce), eta=eta, queue=self.queue)

    def start_invocation(self, invocation_id: int, eta: datetime | None = None) -> None:
        self.app.send_task(
            "cronchain.start_invocation", args=(invocation_id,), eta=eta, queue=self.queue
        )

    def send_task(
        self, name: str, args: list[Any], kwargs: dict[str, Any], queue: str, invocation_id: int
    ) -> None:
        ids = {"invocation_id": invocation_id}
        self.app.send_task(
            name,
            args=args,
            kwargs=kwargs,
            queue=queue,
            link=self.app.signature("cronchain.invocation_succeeded", kwargs=ids, queue=self.queue),
            link_error=self.app.signature(
                "cronchain.invocation_failed", kwargs=ids, queue=self.queue
            ),
        )
