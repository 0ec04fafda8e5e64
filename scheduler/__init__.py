"""cronchain's scheduler: schedules, job specs, storage, the engine and its invokers.

The names below are imported when first used (PEP 562), so that a module which only
declares jobs (``from cronchain.scheduler import periodic``) loads neither SQLAlchemy nor
the engine, and importing any part of the package does not import all of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.declare.periodic import periodic
    from cronchain.scheduler.errors import CronchainError, NotFound, SpecError, TransientError
    from cronchain.scheduler.spec.jobspec import JobSpec
    from cronchain.scheduler.workers.hooks import heartbeat, install

_HOME = {
    "CronchainError": "errors",
    "JobSpec": "spec.jobspec",
    "NotFound": "errors",
    "Scheduler": "api",
    "SpecError": "errors",
    "TransientError": "errors",
    "heartbeat": "workers.hooks",
    "install": "workers.hooks",
    "periodic": "declare.periodic",
}
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


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
