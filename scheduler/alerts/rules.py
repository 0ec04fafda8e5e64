"""Which events of a job's slots raise an alert: pure, from the job's stored spec.

- ``failed``: an attempt of the slot failed (retried or not); once per slot.
- ``retries_exhausted``: the slot ended FAILED: its last attempt failed.
- ``skipped``: the slot was recorded SKIPPED (overlap, misfire), unless a pause or a
  disabled job skipped it: someone chose that.
- ``recovered``: the slot succeeded after an alert of ``failed`` or
  ``retries_exhausted`` that no ``recovered`` has followed yet.
- ``upstream_stale``: the slot waited ``max_wait`` for its upstreams (``requires``) and
  they were still not met; raised whatever ``on_unmet`` then does.
- ``late_start>D``: the slot's first attempt was not claimed by a worker within D of
  the slot (raised at the claim, or by the watchdog while it still waits).
- ``running_longer>D``: an attempt has run for longer than D since its claim
  (raised by the watchdog).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronchain.scheduler.spec.model import ALERT_EVENTS, ALERT_THRESHOLDS
from cronchain.statemachine import Reason

# The events, named as the spec's grammar accepts them.
FAILED, EXHAUSTED, SKIPPED, RECOVERED, UPSTREAM_STALE = ALERT_EVENTS
LATE_START, RUNNING_LONGER = ALERT_THRESHOLDS
# Skips someone chose: slots a pause passed over, triggers of a disabled job.
NOT_ALERTED_SKIPS = (Reason.PAUSED, Reason.DISABLED)


@dataclass(frozen=True)
class AlertRules:
    """A job's ``alerts``, parsed: the plain events, the two thresholds, the channels."""

    events: frozenset[str]
    late_start: timedelta | None
    running_longer: timedelta | None
    to: tuple[str, ...]

    @classmethod
    def of(cls, stored: Mapping[str, Any]) -> AlertRules:
        """From the normalized form (``{"on": ["late_start>120s", ...], "to": [...]}``)."""
        plain, thresholds = set(), {}
        for event in stored["on"]:
            name, _, seconds = event.partition(">")
            if seconds:
                thresholds[name] = timedelta(seconds=float(seconds.rstrip("s")))
            else:
                plain.add(name)
        return cls(
            frozenset(plain),
            thresholds.get(LATE_START),
            thresholds.get(RUNNING_LONGER),
            tuple(stored["to"]),
        )

    def ended(self, status: str, *, final: bool, reason: str | None) -> list[str]:
        """The events of an attempt that ended ``status`` (``final``: the slot ended
        with it). ``recovered`` is a candidate only: it needs an open failure alert."""
        if status == "FAILED":
            wanted = [FAILED, *([EXHAUSTED] if final else [])]
        elif status == "SUCCEEDED":
            wanted = [RECOVERED]
        elif status == "SKIPPED" and reason not in NOT_ALERTED_SKIPS:
            wanted = [SKIPPED]
        else:
            wanted = []
        return [event for event in wanted if event in self.events]

    def late(self, slot: datetime | None, now: datetime) -> str | None:
        """``late_start>D`` if a slot's first attempt, unclaimed at ``now``, is late."""
        if self.late_start is None or slot is None or now - slot <= self.late_start:
            return None
        return f"{LATE_START}>{self.late_start.total_seconds():g}s"

    def long(self, claimed: datetime | None, now: datetime) -> str | None:
        """``running_longer>D`` if an attempt claimed at ``claimed`` runs too long."""
        if self.running_longer is None or claimed is None:
            return None
        if now - claimed <= self.running_longer:
            return None
        return f"{RUNNING_LONGER}>{self.running_longer.total_seconds():g}s"


_RULES: dict[str, AlertRules] = {}


def rules_of(spec: Mapping[str, Any]) -> AlertRules | None:
    """A job's rules, parsed once per set of values; None for a job without alerts
    (most jobs: they pay one dictionary lookup)."""
    stored = spec.get("alerts")
    if not stored:
        return None
    key = repr(stored)
    rules = _RULES.get(key)
    if rules is None:
        if len(_RULES) > 8192:
            _RULES.clear()
        rules = _RULES[key] = AlertRules.of(stored)
    return rules
