"""cronchain's small error vocabulary.

``CronchainError`` is the base. ``SpecError`` (and its ``ConfigError``) and ``NotFound``
are permanent (bad input from a user: report it, never retry); ``TransientError`` wraps
what may pass (a database restart, a broker outage, a database not migrated yet) and is
the only kind that Celery tasks retry. The CLI exits 2 for the permanent ones and 1 for
``TransientError``, printing the message alone: each says what went wrong and where.
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


class ConfigError(SpecError):
    """A ``CRONCHAIN_*`` variable holds a value cronchain cannot use. The field is the
    variable, and the message says what it accepts."""


class NotFound(CronchainError):
    """A job or an invocation named by the user does not exist."""


class TransientError(CronchainError):
    """A failure that may pass (database or broker unreachable): retry later."""
