"""The job machine's data: its states, the snapshot it steps, the result of a step, and
the context a step's callbacks read (its inputs) and write (its actions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from cronchain.statemachine.actions import Action
from cronchain.statemachine.events import Event
from cronchain.statemachine.policy import MisfirePolicy, OverlapPolicy


class JobState(StrEnum):
    DISABLED = "DISABLED"
    SCHEDULED = "SCHEDULED"
    SUSPENDED = "SUSPENDED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    OVERRUN = "OVERRUN"


class Schedule(Protocol):
    """The schedule maths the machine needs (``scheduler.schedules`` implements it)."""

    @property
    def relative(self) -> bool:
        """True for a fixed delay: the next slot counts from the end of the last run."""

    @property
    def misfire_grace(self) -> timedelta:
        """A slot handled later than this after its time is a misfire."""

    def next_after(self, t: datetime) -> datetime | None:
        """The first slot strictly after ``t`` (None: the job never ticks)."""

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        """The newest slot at or before ``t``."""


@dataclass
class JobSnapshot:
    """The part of a job row the machine reads and writes."""

    state: JobState = JobState.DISABLED
    tick_at: datetime | None = None
    tick_nonce: int | None = None
    invocation_id: int | None = None  # the newest invocation started
    invocation_running: bool = False  # an active invocation has reported its start
    overruns: int = 0
    active: int = 0  # invocations STARTING or RUNNING
    buffered: int = 0  # invocations WAITING for a free place
    missed_from: datetime | None = None  # paused: the first slot not fired

    def copy(self) -> JobSnapshot:
        """A copy to step. ``dataclasses.replace`` took four times as long, checking each
        field's ``init``: a sixteenth of the control path, which steps twice a fire."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new


@dataclass
class Step:
    """The machine's answer: the new snapshot, the actions, and whether either differs
    from doing nothing (so the engine can skip a write)."""

    snapshot: JobSnapshot
    actions: list[Action]
    changed: bool


@dataclass
class Context:
    """What a step knows besides the snapshot: its inputs, and the actions it emits."""

    now: datetime
    schedule: Schedule
    nonce: int
    event: Event
    actions: list[Action]
    policy: OverlapPolicy
    misfire: MisfirePolicy
    plan: Plan | None = None


@dataclass
class Plan:
    """What a due tick does: the slots to run, those to record as SKIPPED ("misfire"),
    and whether the runs are a catch-up (they wait their turn, whatever the overlap)."""

    run: list[datetime]
    skip: list[datetime]
    catch_up: bool
