"""Recording what exists in one process only: an attempt's outcome, a gate's answer.

Neither is asked again once its worker has it (the call was made, the check taken), so
its record must not be lost to a database restart or to the bytes it holds:

- :func:`patiently` waits out a database that is away (about 15 s) rather than leave a
  finished run to expire as "lease expired" or a gate to go unanswered;
- :func:`textless_if_refused` records it without its text when the database refuses it
  for anything else: ``scheduler.outside`` makes text storable, and this is the net under
  it, so that what a task or an endpoint said never costs a run its end or a gate its yes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from cronchain.scheduler.errors import TransientError

T = TypeVar("T")

log = logging.getLogger("cronchain.engine")
RETRY_DELAYS = (0.25, 0.5, 1, 2, 4, 8)  # seconds


def patiently(attempt: Callable[[], T], what: str) -> T:
    """``attempt()`` until it does not raise TransientError, for about 15 s; then the
    TransientError is raised. Returns what ``attempt`` returned."""
    for delay in (*RETRY_DELAYS, None):
        try:
            return attempt()
        except TransientError as err:
            if delay is None:
                raise
            log.warning("recording %s: %s; again in %s s", what, err, delay)
            time.sleep(delay)
    raise AssertionError("unreachable: the last delay raises")


def textless_if_refused(record: Callable[[bool], T], what: str) -> T:
    """``record(True)``; if that raises anything but TransientError, ``record(False)``,
    which records the same without its text (logged at ERROR, with why)."""
    try:
        return record(True)
    except TransientError:
        raise
    except Exception:
        log.error(
            "%s could not be recorded as it is; trying again without its text",
            what,
            exc_info=True,
        )
        return record(False)
