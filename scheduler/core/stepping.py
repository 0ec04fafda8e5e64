"""A job's machine stepped under its own schedule and policies, and the tick that goes
with a step. The engine's ``feed``, the tick and outcome batches, a step's actions and
``apply`` all need these; kept below them, none calls back up into the engine for them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from cronchain.scheduler.core.effects import Message, SendTick, Stepped
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.rows import JobRow
from cronchain.scheduler.timing.eta import round_up, tick_eta
from cronchain.scheduler.timing.schedules import Schedule, stored_schedule
from cronchain.statemachine import Event, JobSnapshot, Repair, Step, step


def random_nonce() -> int:
    """A tick's nonce: only the tick that carries the job's current one is fed.

    Drawn from a generator of this process's own, not ``secrets``: a nonce fences a
    tick, it guards no secret, and a read of the kernel's entropy per step showed as 8%
    of the control path's samples in a profile. Its own, so that a project's
    ``random.seed`` cannot make workers draw alike, and seeded again in each forked
    child for the same reason."""
    return _NONCES.getrandbits(62) + 1


_NONCES = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _NONCES.seed(os.urandom(32)))


@lru_cache(maxsize=8192)
def schedule_of(text: str, timezone: str, days: str | None = None) -> Schedule:
    return stored_schedule(text, timezone, days)


@dataclass(frozen=True)
class Stepper:
    """How this process steps a job's machine: the grace within which a tick must
    arrive, the horizon and slack of a tick's ETA, and the nonces that fence each tick.
    ``engine.stepper``."""

    grace: timedelta
    horizon: timedelta
    slack: timedelta
    nonces: Callable[[], int]

    @property
    def repair_grace(self) -> timedelta:
        """How long a step the watchdog repaired may take: an interval more than any
        other (grace is half an interval). A mass repair (Redis flushed under 10,000
        jobs) sends thousands of ticks at once; if the next pass repaired the slowest of
        them again, each time with a new nonce and at the back of the queue, the queue
        would never drain."""
        return 3 * self.grace

    def step(
        self,
        job: JobRow,
        snapshot: JobSnapshot,
        event: Event,
        now: datetime,
        spec: JobSpec | None = None,
    ) -> Step:
        """One step of ``job``'s machine from ``snapshot``, under its policies and its
        schedule, or ``spec``'s when a new spec is being applied."""
        declared = spec or job
        controls = job.controls
        return step(
            snapshot,
            event,
            now=now,
            schedule=schedule_of(declared.schedule, declared.timezone, declared.days),
            nonce=self.nonces(),
            policy=controls.overlap,
            misfire=controls.misfire,
        )

    def tick_message(self, job: JobRow, when: datetime, nonce: int, now: datetime) -> SendTick:
        return SendTick(job.id, nonce, tick_eta(when, now, slack=self.slack, horizon=self.horizon))

    def settle_tick(self, job: JobRow, event: Event, fed: Stepped) -> datetime | None:
        """Keep the current nonce's tick alone (a follow-up may have replaced the tick)
        and return the watchdog deadline that goes with it.

        A tick whose slot lies past the horizon is parked rather than sent: it stays in
        the job's row (``tick_at``, ``tick_nonce``) and its deadline is the moment the
        slot comes within the horizon, when the watchdog sends it (``wake``). A message
        held until the horizon and sent on again (a hop) cost every job of a long
        period a step and a write each horizon: 3,000 steps a second at a million
        daily and hourly jobs, to fire none. Parked, such a job costs a row update and a
        share of a message per slot. A parked tick is told from one in flight by its
        deadline alone: before its slot (``parked``), where a sent one's is after."""
        tick = next((m for m in fed.messages if _is_tick(m, fed.snapshot.tick_nonce)), None)
        fed.messages = [m for m in fed.messages if not isinstance(m, SendTick) or m is tick]
        tick_at = fed.snapshot.tick_at
        if fed.snapshot.tick_nonce is None or tick_at is None:
            return None
        if tick is None:
            return job.watchdog_at
        if tick.eta < round_up(tick_at, self.slack):  # held to the horizon: park it
            fed.messages.remove(tick)
            return self.wake_at(tick_at)
        # A tick due in the past (a repair, a late slot) is sent to run now: its grace
        # counts from then, or the next sweep would repair it again.
        grace = self.repair_grace if isinstance(event, Repair) else self.grace
        return tick.eta + grace

    def wake_at(self, tick_at: datetime) -> datetime:
        """When a parked tick is sent: its slot, a horizon ahead."""
        return tick_at - self.horizon

    def wake(self, job_id: int, tick_at: datetime, nonce: int, now: datetime) -> Woken:
        """The message of a parked tick whose slot has come within the horizon, and its
        job's new deadline; or, for a slot still past it (a tick parked under a longer
        horizon, a hop in flight at the upgrade that began parking), no message and the
        deadline it is parked to."""
        if tick_at - now > self.horizon:
            return None, self.wake_at(tick_at)
        eta = max(round_up(tick_at, self.slack), now)  # not capped: ``wake_at`` bounds it
        # A wake late past its slot (the watchdog was down) goes out with every other one
        # overdue, as a mass repair does: it has as long to arrive.
        grace = self.repair_grace if eta == now else self.grace
        return SendTick(job_id, nonce, eta), eta + grace


# A woken tick's message (None if it is parked again) and its job's watchdog deadline.
Woken = tuple[SendTick | None, datetime]


def _is_tick(message: Message, nonce: int | None) -> bool:
    return isinstance(message, SendTick) and message.nonce == nonce
