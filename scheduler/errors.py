"""cronchain's small error vocabulary.

``CronchainError`` is the base. ``SpecError`` and ``NotFound`` are permanent (bad input
from a user: report it, never retry); ``TransientError`` wraps what may pass (a database
restart, a broker outage) and is the only kind that Celery tasks retry.
"""

from __future__ import annotations


class CronchainError(Exception):
    """Base of every error cronchain raises on purpose."""


class SpecError(CronchainError):
    """Invalid user input; the message names where (file, job) and the field."""

    def __init__(self, field: str, message: str, *, where: str = ""):
        self.field = field
        self.where = where
        self.reason = message
        super().__init__(self._render())

    def _render(self) -> str:
        place = f"{self.where}: " if self.where else ""
        return f"{place}{self.field}: {self.reason}"

    def located(self, where: str) -> SpecError:
        """The same error, placed (``jobs.yaml: job 'ping'``)."""
        return SpecError(self.field, self.reason, where=where)


class NotFound(CronchainError):
    """A job or an invocation named by the user does not exist."""


class TransientError(CronchainError):
    """A failure that may pass (database or broker unreachable): retry later."""
