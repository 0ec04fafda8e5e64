"""What the pages and controls of one app share: set once by ``create_app``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import Engine

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.web import csrf


@dataclass(frozen=True)
class WebContext:
    """The database the pages read, the ``Scheduler`` the controls act through (as the
    CLI does), the credentials (None: read-only), the clock, and how late a tick may be
    before the page flags it overdue (the watchdog's grace, as /metrics counts them)."""

    db: Engine
    scheduler: Scheduler
    credentials: str | None
    now: Callable[[], datetime]
    grace: timedelta

    @property
    def operator(self) -> bool:
        """Whether the request comes from a signed-in operator: credentials are set, and
        ``create_app`` let no request through without them."""
        return self.credentials is not None

    @property
    def csrf_token(self) -> str | None:
        return None if self.credentials is None else csrf.token(self.credentials)


def context() -> WebContext:
    found: WebContext = current_app.extensions["cronchain"]
    return found
