"""cronchain's scheduler: schedules, job specs, storage, the engine and its invokers."""

from scheduler.api import Scheduler
from scheduler.errors import CronchainError, NotFound, SpecError, TransientError
from scheduler.spec import JobSpec

__all__ = ["CronchainError", "JobSpec", "NotFound", "Scheduler", "SpecError", "TransientError"]
