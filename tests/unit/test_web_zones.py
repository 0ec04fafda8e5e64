"""The page's times in a job's zone and its DST marks, with real zone data and fixed
instants: a transition before the next tick, one soon after it, a wall time the clocks
show twice, a zone without DST, and the CSRF token (a pure function of credentials)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronchain.scheduler.web import csrf
from cronchain.scheduler.web.zones import dst_notes, next_tick, shown

NOW = datetime(2026, 10, 20, 12, tzinfo=UTC)
BACK = "DST: clocks go back 1 h on 2026-10-25: 03:00 CEST becomes 02:00 CET"


@pytest.mark.parametrize(
    ("tick", "zone", "text", "dst", "before"),
    [
        (
            datetime(2026, 10, 26, 8, tzinfo=UTC),
            "Europe/Paris",
            "2026-10-26 09:00:00 CET",
            f"{BACK}, before this tick",
            True,
        ),
        (
            datetime(2026, 10, 21, 8, tzinfo=UTC),
            "Europe/Paris",
            "2026-10-21 10:00:00 CEST",
            f"{BACK}, after this tick",
            False,
        ),
        (
            datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
            "Europe/Paris",
            "2026-10-25 02:30:00 CEST",
            f"{BACK}, after this tick; this wall time occurs twice; this is the first",
            False,
        ),
        (
            datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
            "Europe/Paris",
            "2026-10-25 02:30:00 CET",
            f"{BACK}, before this tick; this wall time occurs twice; this is the second",
            True,
        ),
        (
            datetime(2026, 12, 1, 8, tzinfo=UTC),
            "Asia/Tokyo",
            "2026-12-01 17:00:00 JST",
            None,
            False,
        ),
        (datetime(2026, 10, 21, 8, tzinfo=UTC), "UTC", "2026-10-21 08:00:00 UTC", None, False),
    ],
)
def test_next_tick_in_its_zone(tick, zone, text, dst, before):  # type: ignore[no-untyped-def]
    found = next_tick(tick, zone, NOW)
    assert (found.text, found.dst, found.dst_before) == (text, dst, before)


def test_a_transition_far_after_the_tick_is_not_marked():
    found = next_tick(datetime(2026, 10, 1, 8, tzinfo=UTC), "Europe/Paris", NOW.replace(day=1))
    assert found.dst is None  # 24 days away, and after the tick


def test_timeline_notes_and_offsets():
    notes = dst_notes(NOW, datetime(2027, 4, 1, tzinfo=UTC), "America/New_York")
    assert [text for _, text in notes] == [
        "DST: clocks go back 1 h on 2026-11-01: 02:00 EDT becomes 01:00 EST",
        "DST: clocks go forward 1 h on 2027-03-14: 02:00 EST becomes 03:00 EDT",
    ]
    assert shown(NOW, "Asia/Kolkata").offset == "+05:30"
    assert shown(NOW, "No/Such_Zone").text == "2026-10-20 12:00:00 UTC"  # never breaks


def test_csrf_token_depends_on_the_credentials_and_hides_them():
    token = csrf.token("admin:s3cret")
    assert token == csrf.token("admin:s3cret") != csrf.token("admin:other")
    assert "s3cret" not in token and len(token) == 64
