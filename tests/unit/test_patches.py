"""The kombu workaround: a channel whose connection is gone raises a connection error
(which kombu handles) rather than AttributeError (which kills a Celery worker). The fault
suite's redis_restart_empty shows the worker surviving; this pins the mechanism."""

from types import SimpleNamespace

import pytest
import redis.exceptions
from kombu.transport import redis as transport

from scheduler.workers.patches import guard_redis_channel


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
