"""cronchain's scheduler: schedules, job specs, storage, the engine and its invokers."""

from scheduler.api import Scheduler
from scheduler.declared import periodic
from scheduler.errors import CronchainError, NotFound, SpecError, TransientError
from scheduler.spec import JobSpec
from scheduler.workers.hooks import heartbeat, install

__all__ = [
    "CronchainError",
    "JobSpec",
    "NotFound",
    "Scheduler",
    "SpecError",
    "TransientError",
    "heartbeat",
    "install",
    "periodic",
]
