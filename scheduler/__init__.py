"""cronchain's scheduler: schedules, job specs, storage, the engine and its invokers."""

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.declared import periodic
from cronchain.scheduler.errors import CronchainError, NotFound, SpecError, TransientError
from cronchain.scheduler.spec import JobSpec
from cronchain.scheduler.workers.hooks import heartbeat, install

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
