"""A watch on a worker's AMQP connections, installed in each worker of the fault rig.

A worker's connection to RabbitMQ is read by its main thread. A second reader splits
frames with it, and the worker stops taking messages: Celery raised the prefetch count
again after a reconnection from the pool's threads, with a ``basic.qos`` that waits for
its answer (``celeryconfig``'s ``worker_enable_prefetch_count_reduction``). A worker
logs ``OFF_MAIN`` with the stack of the first read each other thread makes, which the
RabbitMQ faults look for.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

OFF_MAIN = "an AMQP frame read off the main thread"
log = logging.getLogger("cronchain.faults")


def install() -> None:
    import amqp.transport

    read_frame = amqp.transport._AbstractTransport.read_frame
    told: set[int | None] = set()

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        thread = threading.current_thread()
        if thread is not threading.main_thread() and thread.ident not in told:
            told.add(thread.ident)
            stack = "".join(traceback.format_stack(limit=12))
            log.error("%s (%s):\n%s", OFF_MAIN, thread.name, stack)
        return read_frame(self, *args, **kwargs)

    amqp.transport._AbstractTransport.read_frame = watched  # type: ignore[method-assign]
