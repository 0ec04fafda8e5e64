"""The workarounds of ``scheduler.workers.patches``.

kombu's: a channel whose connection is gone raises a connection error (which kombu
handles) rather than AttributeError (which kills a Celery worker). The fault suite's
redis_restart_empty shows the worker surviving; this pins the mechanism.

Celery's: a task held for its ETA is freed when it is done, not left to the collector."""

import gc
import weakref
from datetime import UTC, datetime
from types import MethodType, SimpleNamespace

import pytest
import redis.exceptions
from celery.worker import state
from celery.worker.consumer.consumer import Consumer
from kombu.asynchronous.timer import Timer
from kombu.transport import redis as transport

from cronchain.scheduler.workers.patches import guard_redis_channel, release_fired_eta_entries


def test_a_detached_channel_raises_a_connection_error():
    guard_redis_channel()
    guard_redis_channel()  # twice is once
    detached = SimpleNamespace(connection=None)
    with pytest.raises(redis.exceptions.ConnectionError):
        transport.Channel._connparams(detached)
    orphaned = SimpleNamespace(connection=SimpleNamespace(client=None))
    with pytest.raises(redis.exceptions.ConnectionError):
        transport.Channel._connparams(orphaned)
    assert redis.exceptions.ConnectionError in transport.Transport.connection_errors


class _Request:
    """What Celery's ETA path needs of a request: an id, and a slot for its entry."""

    _eta_timer_entry = None

    def __init__(self, task_id: str) -> None:
        self.id = task_id


def _held(consumer: SimpleNamespace, timer: Timer) -> _Request:
    """A task held for its ETA, as celery.worker.strategy holds it."""
    request = _Request("held")
    request._eta_timer_entry = timer.call_at(
        datetime.now(UTC), MethodType(Consumer.apply_eta_task, consumer), (request,), priority=6
    )
    state.task_scheduled(request)
    return request


def _consumer(timer: Timer) -> SimpleNamespace:
    return SimpleNamespace(
        on_task_request=lambda request: None,
        qos=SimpleNamespace(decrement_eventually=lambda: None),
        controller=None,
        task_buckets={},
        timer=timer,
        pool=None,
    )


def test_the_eta_patch_is_made_once():
    release_fired_eta_entries()
    made = Consumer.apply_eta_task, Consumer.on_close
    release_fired_eta_entries()
    assert (Consumer.apply_eta_task, Consumer.on_close) == made


def test_a_task_held_for_its_eta_is_freed_by_reference_counting_once_done():
    """Celery 5.7 keeps a held task's timer entry on the task and the task in the entry's
    arguments: a cycle, so that every tick the control worker held for its ETA was
    garbage for the cyclic collector, whose full passes pause the whole process."""
    release_fired_eta_entries()
    timer = Timer()
    request = _held(_consumer(timer), timer)
    gone = weakref.ref(request)
    gc.disable()
    try:
        timer.queue[0].entry()  # the hub fires it when due
        state.task_ready(request)  # the pool has run it
        timer.clear()
        del request
        assert gone() is None, "the task outlived its last reference (a reference cycle)"
    finally:
        gc.enable()


def test_a_held_task_dropped_with_its_connection_is_freed_by_reference_counting():
    """A lost connection cancels the held tasks' entries, which stay in the timer until
    their ETA: then the task must go with its entry, not wait for the collector."""
    release_fired_eta_entries()
    timer = Timer()
    consumer = _consumer(timer)
    request = _held(consumer, timer)
    gone = weakref.ref(request)
    gc.disable()
    try:
        Consumer.on_close(consumer)  # type: ignore[arg-type]
        assert timer.queue[0].entry.canceled
        timer.clear()  # the cancelled entry's ETA has come
        del request
        assert gone() is None, "the task outlived its last reference (a reference cycle)"
    finally:
        gc.enable()
