"""The slow ``celery`` job of the fault suite (imported by workers via CRONCHAIN_IMPORTS).

Each run of its body appends ``invocation attempt time`` to a file, so the ledger can
tell a body that ran twice for the same attempt (a fencing failure) from a retry, and
when it ran.

Every worker of the rig imports it, and with it a watch on its AMQP connections
(``tests.faults.amqp_watch``)."""

import os
import time

from cronchain.tasks import app
from tests.faults import amqp_watch

amqp_watch.install()


@app.task(name="faults.slow", bind=True)
def slow(self, log: str, seconds: float) -> None:  # type: ignore[no-untyped-def]
    header = getattr(self.request, "cronchain", None) or {}
    line = f"{header.get('invocation')} {header.get('attempt')} {time.time()}\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
