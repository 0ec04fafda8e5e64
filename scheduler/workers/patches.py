"""Workarounds for bugs in the libraries cronchain runs on; the fault suite shows each."""

from __future__ import annotations

from typing import Any


def guard_redis_channel() -> None:
    """Keep a worker alive when Redis restarts under it.

    When kombu 5.7 loses its Redis connection it detaches the old channel from its
    transport, but still uses that channel afterwards: to put its unacknowledged messages
    back as it closes, and to acknowledge tasks that finish after the reconnection. Each
    use raises ``AttributeError`` on the missing transport, which Celery treats as
    unrecoverable, so the worker exits. Raising Redis's ``ConnectionError`` instead lets
    kombu's own handling of a lost connection log the failed restore or acknowledgement
    and go on. Nothing is lost: a message Redis still holds is restored by kombu later,
    and cronchain's watchdog repairs any chain whose message is gone."""
    import redis.exceptions
    from kombu.transport import redis as transport

    original = transport.Channel._connparams
    if getattr(original, "guarded", False):
        return

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("this channel's connection is closed")
        return original(self, asynchronous)

    _connparams.guarded = True  # type: ignore[attr-defined]
    transport.Channel._connparams = _connparams


def reuse_redis_clients() -> None:
    """Let a kombu Redis channel reuse one client instead of building one per operation.

    kombu 5.7 builds a new ``redis.Redis`` for every message it publishes and every
    acknowledgement, and redis-py 8 copies its table of some 170 response callbacks into
    each new client (redis-py issue 3624): about 0.1 ms of CPU per message sent and per
    acknowledgement, measured alone. A client is thread-safe and holds no connection of its
    own (it borrows from the pool), so one per channel and pool is enough; a new pool
    (after a reconnection) gets a new client."""
    from kombu.transport import redis as transport

    original = transport.Channel._create_client
    if getattr(original, "reusing", False):
        return

    def _create_client(self: Any, asynchronous: bool = False) -> Any:
        if asynchronous:
            return original(self, asynchronous)
        pool = self.pool
        client = self.__dict__.get("_cronchain_client")
        if client is None or client.connection_pool is not pool:
            client = self.__dict__["_cronchain_client"] = original(self, False)
        return client

    _create_client.reusing = True  # type: ignore[attr-defined]
    transport.Channel._create_client = _create_client


def release_fired_eta_entries() -> None:
    """Let a task held for its ETA be freed as soon as it is done or dropped.

    Celery 5.7 keeps the timer entry of a task it holds for its ETA on the task
    (``Request._eta_timer_entry``, to cancel it when the connection closes), and the entry
    holds the task among its arguments: a reference cycle, so that every such task, once
    run, stays in memory until the cyclic collector's next full pass. Every tick of
    cronchain's chain is held for its ETA, so the control worker's main process made about
    20 objects of such garbage per fire, and its full passes, which stop the process, grew
    with them. Once the entry has fired there is nothing left to cancel (Celery is about
    to move the task from its scheduled requests to its reserved ones), and once a lost
    connection has cancelled it neither: forgetting it then breaks the cycle. (A task
    under a rate limit keeps it: cronchain sets none.)"""
    from celery.worker import state
    from celery.worker.consumer.consumer import Consumer

    fired = Consumer.apply_eta_task
    if getattr(fired, "releasing", False):
        return
    closed = Consumer.on_close

    def apply_eta_task(self: Any, task: Any) -> Any:
        task._eta_timer_entry = None
        return fired(self, task)

    def on_close(self: Any) -> Any:
        held = tuple(state.scheduled_requests)  # on_close cancels their entries
        try:
            return closed(self)
        finally:
            for task in held:
                task._eta_timer_entry = None

    apply_eta_task.releasing = True  # type: ignore[attr-defined]
    Consumer.apply_eta_task = apply_eta_task
    Consumer.on_close = on_close
