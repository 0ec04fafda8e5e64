"""Wiring: settings -> database, Celery port, invokers -> engine. The one place that
turns the environment into live objects, for workers and for the CLI alike."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url
from sqlalchemy import Engine as SqlEngine

from cronchain.scheduler.core.effects import Port
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import ConfigError, SpecError, TransientError
from cronchain.scheduler.invokers import Call, default_invokers
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage.clock import database_clock
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.workers import clocks
from cronchain.scheduler.workers.port import CeleryPort

# How long a process that only sends (the CLI, a script) waits for a broker that does
# not answer: each connection attempt or command gives up after SEND_TIMEOUT seconds, and
# is made twice. Workers and beat keep Celery's own patience (celeryconfig).
SEND_TIMEOUT = 1.5
_SEND_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    engine: Engine

    @classmethod
    def current(cls, app: Celery) -> Runtime:
        """One runtime per worker process, made after the fork (connections do not
        survive it), and one only for all the threads of a work-path worker."""
        global _current
        with _making:
            if _current is None or _current[0] != os.getpid():
                _current = (os.getpid(), cls.from_env(app))
            return _current[1]

    @classmethod
    def from_env(cls, app: Celery | None = None) -> Runtime:
        """A worker's runtime on its ``app``; without one (a script), a runtime whose
        sends give up on a broker that does not answer within a few seconds."""
        settings = Settings.from_env()
        port = CeleryPort(app or sending_app(), settings.queue, settings.work_queue)
        return cls._wire(settings, port, worker=app is not None)

    @classmethod
    def for_command(cls) -> Runtime:
        """The runtime of one CLI command: as ``from_env()`` without an app, and after
        the first message the broker does not take it sends no more (each would wait as
        long) and says why in ``unsent``."""
        settings = Settings.from_env()
        port = CeleryPort(sending_app(), settings.queue, settings.work_queue)
        return cls._wire(settings, CommandPort(port, settings.broker_url))

    @classmethod
    def _wire(cls, settings: Settings, port: Port, *, worker: bool = False) -> Runtime:
        try:
            db = make_engine(settings.database_url)
        except SpecError as err:
            raise ConfigError("CRONCHAIN_DATABASE_URL", err.reason) from None
        return cls(settings, engine_of(db, port, settings, background_rechecks=worker))

    @property
    def unsent(self) -> TransientError | None:
        """Why messages of this runtime's commands did not reach the broker, if some did
        not (``for_command`` only). Their state is committed: the watchdog sends them."""
        port = self.engine.port
        return port.unsent if isinstance(port, CommandPort) else None


def engine_of(
    db: SqlEngine, port: Port, settings: Settings, *, background_rechecks: bool = False
) -> Engine:
    """The engine on ``db`` that sends through ``port``, as ``settings`` configure it:
    every process's (workers, commands, ``cronchain serve``'s controls) alike; a
    worker's looks again at waiting runs in a thread (``scheduler.core.rechecks``)."""
    return Engine(
        db,
        port,
        default_invokers(settings.http_allow),
        grace=settings.watchdog_grace,
        batch=settings.tick_batch,
        slack=settings.tick_slack,
        clock=database_clock(db),
        background_rechecks=background_rechecks,
    )


def sending_app() -> Celery:
    """The Celery app of a process that only sends: configured as the workers' is
    (celeryconfig), but with ``patience_of_a_command``."""
    app = Celery("cronchain", task_cls=clocks.Task)
    app.config_from_object("cronchain.celeryconfig")
    return patience_of_a_command(clocks.use_database_clock(app))


def patience_of_a_command(app: Celery) -> Celery:
    """``app``, made to give up on a broker that does not answer within a few seconds,
    rather than retrying for as long as a worker would."""
    timeouts = {"socket_timeout": SEND_TIMEOUT, "socket_connect_timeout": SEND_TIMEOUT}
    app.conf.update(
        broker_transport_options={**app.conf.broker_transport_options, **timeouts, **_SEND_RETRY},
        broker_connection_timeout=SEND_TIMEOUT,
        broker_connection_max_retries=_SEND_RETRY["max_retries"],
        task_publish_retry_policy=_SEND_RETRY,
    )
    return app


class CommandPort:
    """The port of one command run by a person. It sends as ``CeleryPort`` does, until
    a message does not reach the broker; from then on it sends nothing (each would wait
    as long), and ``unsent`` says why. Each message it could not send raises
    ``TransientError``: the engine logs it and carries on, since the state that message
    carried is committed and the watchdog sends it once the broker is back."""

    def __init__(self, port: CeleryPort, broker_url: str):
        self.port = port
        self.broker = maybe_sanitize_url(broker_url)
        self.unsent: TransientError | None = None

    def sending(self) -> AbstractContextManager[None]:
        """``CeleryPort.sending``: many ticks through one producer, in pipelines. If the
        last pipeline does not reach the broker, ``unsent`` says so."""
        return self.port.sending(unsent=self._lost)

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self._send(self.port.tick_later, job_id, nonce, eta)

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None:
        self._send(self.port.tick_batch, ticks, eta)

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None:
        self._send(self.port.start_invocation, invocation_id, attempt, eta)

    def run(self, call: Call) -> None:
        self._send(self.port.run, call)

    def run_batch(self, calls: list[Call]) -> None:
        self._send(self.port.run_batch, calls)

    def revoke(self, task_id: str) -> None:
        self._send(self.port.revoke, task_id)

    def alert(self, alert_id: int, eta: datetime | None = None) -> None:
        self._send(self.port.alert, alert_id, eta)

    def gate(
        self, invocation_id: int, gate: str, number: int, job_id: int, eta: datetime | None
    ) -> None:
        self._send(self.port.gate, invocation_id, gate, number, job_id, eta)

    def _send(self, send: Callable[..., None], *args: Any) -> None:
        if self.unsent is not None:
            raise TransientError(str(self.unsent))
        try:
            send(*args)
        except Exception as err:
            if not isinstance(err, self._broker_errors()):
                raise  # a bug, not the broker: the engine logs it with its traceback
            self._lost(err)
            raise TransientError(str(self.unsent)) from err

    def _lost(self, err: Exception) -> None:
        lines = str(err).strip().splitlines() or [type(err).__name__]
        self.unsent = TransientError(f"the broker {self.broker} did not answer ({lines[0]})")

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        connection = self.port.app.connection_for_write()  # not connected: its types only
        return (
            OperationalError,  # kombu's, for the transport's connection errors
            OSError,
            *connection.connection_errors,
            *connection.channel_errors,
        )


_current: tuple[int, Runtime] | None = None
_making = threading.Lock()
