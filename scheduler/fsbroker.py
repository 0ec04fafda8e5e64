"""The embedded broker: kombu's filesystem transport, made safe for several processes.

kombu's own transport creates a message file and then writes into it, so a consumer in
another process can read it empty; the JSON error then stops the worker's consumer. It
also claims a message by moving it to the system's temporary folder, a copy (not an
atomic rename) when that is another file system, so two consumers can both take it.

Here a message is written under a staging name and renamed into the queue, and taken by
an atomic rename into ``processing/`` beside the queue; an unreadable message is logged
and dropped, never fatal.
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
    Channel = Channel


TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
