"""The engine's port onto Celery: sends cronchain's tasks by name.

By name, so that ``scheduler`` never imports the task modules (``tasks`` imports
``scheduler``, not the other way round).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import kombu.exceptions
from celery import Celery

from cronchain.scheduler.invokers import Call
from cronchain.scheduler.invokers.call import message_priority
from cronchain.scheduler.invokers.celery import send_task

log = logging.getLogger(__name__)

# Messages per pipeline of ``sending``: a round trip for each thousand.
PIPELINE = 1000
# A pipeline's failure (kombu 5.7 on; before, there are no pipelines: nothing to catch).
BatchPublishError = getattr(kombu.exceptions, "BatchPublishError", ())


class CeleryPort:
    """Sends ``tick_later``/``tick_batch``/``start_invocation`` on the control path, and
    each attempt to the worker that will run it."""

    def __init__(self, app: Celery, queue: str, work_queue: str = "cronchain.work"):
        self.app = app
        self.queue = queue
        self.work_queue = work_queue
        self._held = threading.local()  # .producer: this thread's, within ``sending``

    @contextmanager
    def sending(self, unsent: Callable[[Exception], None] | None = None) -> Iterator[None]:
        """Ticks this thread sends within the block go through one producer, and to
        Redis in pipelines of ``PIPELINE`` messages (kombu's ``Producer.batch``), not a
        round trip each: ``apply`` sends 100,000 jobs' first ticks in some 12,900
        messages, and each send cost 0.4 ms. A send that flushes a pipeline fails as a
        send does; the last one is flushed as the block ends, and if that fails
        ``unsent(error)`` is told (by default it is logged): the ticks' state is
        committed, and the watchdog sends them. An error in the block discards what it
        has not flushed, for the watchdog likewise."""
        finished = False
        with self.app.producer_or_acquire() as producer:
            try:
                with _pipelined(producer):
                    self._held.producer = producer
                    try:
                        yield
                    finally:
                        self._held.producer = None
                    finished = True
            except Exception as err:
                if not finished:
                    raise
                (unsent or _log_unsent)(_broker_error(err))

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self._send_tick("cronchain.tick_later", (job_id, nonce), eta)

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None:
        self._send_tick("cronchain.tick_batch", (ticks,), eta)

    def _send_tick(self, name: str, args: tuple[Any, ...], eta: datetime) -> None:
        try:
            self.app.send_task(
                name,
                args=args,
                eta=eta,
                queue=self.queue,
                producer=getattr(self._held, "producer", None),
                **self._reprs(args),
            )
        except BatchPublishError as err:
            raise _broker_error(err) from err

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None:
        self.app.send_task(
            "cronchain.start_invocation", args=(invocation_id, attempt), eta=eta, queue=self.queue
        )

    def run(self, call: Call) -> None:
        """A ``celery`` attempt is the job's own task, under the attempt's task id, so
        that a repeated send is one task to revoke. Any other kind's is ``cronchain.run``
        on the work path, under an id of its own: the attempt's is the run's, which the
        work path's task events give it in Flower (``scheduler.workers.events``); the
        carrier's events would merge with the run's there."""
        if call.kind != "celery":
            self.app.send_task(
                "cronchain.run",
                args=(call.invocation_id, call.attempt, call.job_id, call.filed_us),
                queue=self.work_queue,
                task_id=f"{call.task_id}-work",
                priority=message_priority(call.priority, self.app.conf.broker_url),
            )
            return
        send_task(self.app, call)

    def run_batch(self, calls: list[Call]) -> None:
        """Calls of one priority (``scheduler.core.effects.send`` groups them so)."""
        args = ([[call.invocation_id, call.attempt, call.job_id, call.filed_us] for call in calls],)
        self.app.send_task(
            "cronchain.run_batch",
            args=args,
            queue=self.work_queue,
            priority=message_priority(calls[0].priority, self.app.conf.broker_url),
            **self._reprs(args),
        )

    def _reprs(self, args: tuple[Any, ...]) -> dict[str, Any]:
        """A batch's ``argsrepr`` and ``kwargsrepr`` headers (``args_repr``), which
        Celery would otherwise write with ``saferepr``."""
        limit, levels = self.app.amqp.argsrepr_maxsize, self.app.conf.task_repr_maxlevels
        # saferepr({}): no kwargs
        return {"argsrepr": args_repr(args, limit, levels), "kwargsrepr": "{}"}

    def revoke(self, task_id: str) -> None:
        self.app.control.revoke(task_id, terminate=True)

    def alert(self, alert_id: int, eta: datetime | None = None) -> None:
        """An alert's delivery, on the work path: it waits for a webhook or a mail
        server, which the control path never does."""
        self.app.send_task("cronchain.alert", args=(alert_id,), eta=eta, queue=self.work_queue)

    def gate(
        self, invocation_id: int, gate: str, number: int, job_id: int, eta: datetime | None
    ) -> None:
        self.app.send_task(
            "cronchain.gate",
            args=(invocation_id, gate, number, job_id),
            eta=eta,
            queue=self.work_queue,
        )


def _pipelined(producer: Any) -> contextlib.AbstractContextManager[Any]:
    """kombu's ``Producer.batch`` (kombu 5.7 on): sends into a pipeline, flushed each
    ``PIPELINE`` messages and at the end. Before it, each send is a round trip."""
    batch = getattr(producer, "batch", None)
    return contextlib.nullcontext() if batch is None else batch(PIPELINE)


def _broker_error(err: Exception) -> Exception:
    """A pipeline's failure (``BatchPublishError``, then and at each send after it) is
    the broker's error that caused it: what a send without a pipeline raises."""
    cause = err.__cause__
    return cause if isinstance(err, BatchPublishError) and isinstance(cause, Exception) else err


def _log_unsent(err: Exception) -> None:
    log.error("the last tick messages were not sent (%s); the watchdog will send them", err)


# A batch's args nest this deep: a tuple of a list of (job id, nonce) tuples, or of
# [invocation, attempt, job] lists.
_BATCH_LEVELS = 3


def args_repr(args: tuple[Any, ...], limit: int, levels: int) -> str | None:
    """The ``argsrepr`` header of a batch's message (shown by Flower and in the worker's
    log), or None to leave it to Celery (a level left out: ``levels`` from 1 to 2).

    Celery writes it with ``saferepr``, which is pure Python and walks the whole batch
    even past ``limit``, where it has cut: for a batch of 100 runs that was a third of
    the cost of sending it. This is ``repr``, the same text for a batch shorter than
    ``limit``, and for a longer one its items that fit within ``limit``, then ``, ...``,
    as ``saferepr`` ends a cut one (it closes the brackets left open, this does not).
    ``tests/unit/test_port.py`` compares the two."""
    if 0 < levels < _BATCH_LEVELS:
        return None
    text = repr(args)
    if len(text) < limit:
        return text
    # After a whole item of the batch (a tick's pair, a run's triple), not within one.
    cut = max(text.rfind("), ", 0, limit - 3), text.rfind("], ", 0, limit - 3))
    return text[: cut + 1] + ", ..." if cut > 0 else text[: max(0, limit - 3)] + "..."
