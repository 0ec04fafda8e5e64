"""What a feature sees of the engine that hosts it.

Gates and upstreams hold a run before it starts and settle it when the wait ends; they
take the engine as a :class:`Host`: a clock, the grace within which a run must begin,
transactions with both of a run's rows locked, the one place that decides what follows
a run's end (``runs.finished``) and the sending of what was committed. Nothing more of
the engine is theirs, and they are typed against this, never against ``Engine``, so
that the engine may import them and not the reverse (tests/unit/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from cronchain.scheduler.effects import Fed, Message
    from cronchain.scheduler.storage.rows import InvocationRow, JobRow
    from cronchain.statemachine import Event


@runtime_checkable
class RunEnds(Protocol):
    def begin_released(
        self, conn: Connection, messages: list[Message], held: Any = None
    ) -> list[Message]:
        """The runs ``messages`` ask to start, begun in this transaction."""
        ...

    def finished(
        self,
        conn: Connection,
        job: JobRow,
        inv: InvocationRow,
        now: datetime,
        event: Event | None = None,
    ) -> Fed:
        """What follows a run's end, its row written ended."""
        ...


@runtime_checkable
class Host(Protocol):
    grace: timedelta
    clock: Callable[[], datetime]

    @property
    def runs(self) -> RunEnds: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def lock(
        self, conn: Connection, invocation_id: int, job_id: int | None = None
    ) -> tuple[InvocationRow, JobRow] | None: ...

    def send(self, messages: list[Message]) -> None: ...
