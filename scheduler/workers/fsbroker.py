"""The embedded broker: kombu's filesystem transport, made safe for several processes.

kombu's own transport creates a message file and then writes into it, so a consumer in
another process can read it empty; the JSON error then stops the worker's consumer. It
also claims a message by moving it to the system's temporary folder, a copy (not an
atomic rename) when that is another file system, so two consumers can both take it.

Here a message is written under a staging name and renamed into the queue, and taken by
an atomic rename into ``processing/`` beside the queue; an unreadable message is logged
and dropped, never fatal.

The transport also says it is asynchronous, and polls its folder from the worker's event
loop, so that a worker on it runs as on Redis: Celery's event loop and its asynchronous
prefork pool. Without that, Celery picks billiard's blocking pool, whose idle processes
wait for a task holding one lock they all share; when a signal to the whole process group
kills the holder, the lock stays taken and the worker hangs at exit, in the pool's
finalizer, until it is killed (``Transport`` says more).
"""

from __future__ import annotations

import logging
import os
import uuid
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger("cronchain.broker")
ALIAS = "cronchainfs"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        staging = os.path.join(self.data_folder_out, f".{name}.tmp")
        with open(staging, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(staging, final)

    def _get(self, queue: str) -> Any:
        suffix = f".{queue}.msg"
        processing = os.path.join(self.data_folder_in, "processing")
        os.makedirs(processing, exist_ok=True)
        for name in sorted(os.listdir(self.data_folder_in)):
            if not name.endswith(suffix) or name.startswith("."):
                continue
            taken = os.path.join(processing, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except OSError:
                continue  # another consumer took it first
            try:
                with open(taken, "rb") as f:
                    payload = f.read()
            finally:
                os.remove(taken)
            try:
                return loads(bytes_to_str(payload))
            except ValueError:
                log.error("dropped an unreadable message %s (%d bytes)", name, len(payload))
        raise Empty()


class Transport(filesystem.Transport):
    """kombu's filesystem transport, driven by a worker's event loop like Redis's.

    Why: with a transport that is not asynchronous, Celery's prefork worker uses
    billiard's blocking ``Pool``. Its idle processes take turns reading one shared pipe
    under one shared lock, and one of them always holds that lock while it waits. A
    SIGTERM to the worker's process group (``timeout``, systemd, supervisors, a
    terminal's Ctrl-C aside) kills that process on the spot, the lock is never
    released, and the pool's exit finalizer (``Pool._help_stuff_finish``) blocks on it
    forever after "Restoring N unacknowledged message(s)". Celery's asynchronous pool,
    used on Redis, gives each process pipes of its own and notices a killed one.

    The event loop has no file to watch here, so the folder is polled every
    ``polling_interval`` from the loop's timer: at most ``DRAIN_BATCH`` messages a
    pass, as many as the consumer's prefetch allows, so that the loop keeps serving the
    pool between passes.
    """

    Channel = Channel
    implements = filesystem.Transport.implements.extend(asynchronous=True)
    DRAIN_BATCH = 64

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self._poller = loop.call_repeatedly(self.polling_interval, self._drain_waiting)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        self._stop_polling()

    def close_connection(self, connection: Any) -> None:
        self._stop_polling()
        super().close_connection(connection)

    def _stop_polling(self) -> None:
        poller = getattr(self, "_poller", None)
        if poller is not None:
            poller.cancel()
            self._poller = None

    def _drain_waiting(self) -> None:
        """Deliver the messages waiting now; the consumer's QoS stops it at prefetch."""
        for _ in range(self.DRAIN_BATCH):
            try:
                self.cycle.get(self._deliver)
            except Empty:
                return


TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
