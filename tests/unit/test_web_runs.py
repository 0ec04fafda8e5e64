"""A run's page and the charts of a job's last runs, as pure functions of stored rows:
attempts merged from what a retry kept and the row's own columns, waits said in words,
and charts drawn to a round scale."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from cronchain.scheduler.storage.pages import RunDetail, Timing
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.web import chart, jobview, runview

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds_ago: float) -> datetime:
    return NOW - timedelta(seconds=seconds_ago)


def detail(status: str, attempt: int, **columns) -> RunDetail:  # type: ignore[no-untyped-def]
    row = dict(id=1, slot=at(600), trigger_id=None, status=status, reason=None, error=None,
               created_at=at(600), attempt=attempt)  # fmt: skip
    return RunDetail(**(row | columns))


def kept(attempt: int, started: float, finished: float, error: str) -> dict[str, object]:
    """An attempt as a retry records it (``invocations.attempts``)."""
    return {"attempt": attempt, "status": "FAILED", "started_at": iso(at(started)),
            "finished_at": iso(at(finished)), "error": error, "reason": None,
            "worker": f"celery@{attempt}"}  # fmt: skip


def test_a_retried_run_lists_its_kept_attempts_then_its_own() -> None:
    run = detail("RUNNING", 3, worker="celery@3", started_at=at(5),
                 attempts=[kept(1, 300, 290, "boom"), kept(2, 200, 170, "bang")])  # fmt: skip
    lines = runview.attempts(run, "UTC", NOW)
    assert [(a.attempt, a.worker, a.took, a.note) for a in lines] == [
        (1, "celery@1", "10.0 s", "boom"),
        (2, "celery@2", "30.0 s", "bang"),
        (3, "celery@3", "5.0 s so far", None),
    ]


def test_a_run_waiting_for_its_retry_shows_its_last_attempt_once() -> None:
    """While it waits, the row keeps the last attempt's number, start and error, and
    the retry has recorded that attempt already."""
    run = detail("STARTING", 1, started_at=at(300), error="boom",
                 attempts=[kept(1, 300, 290, "boom")])  # fmt: skip
    assert [a.attempt for a in runview.attempts(run, "UTC", NOW)] == [1]


def test_a_run_never_started_has_no_attempt() -> None:
    assert runview.attempts(detail("SKIPPED", 0), "UTC", NOW) == []


def test_each_wait_says_how_it_ended() -> None:
    checks = {
        "held_at": iso(at(100)), "released_at": iso(at(40)),
        "upstream": [{"job": "p/up", "met": True, "success": "2026-03-01T11:59:00Z"}],
        "gate": {"since": iso(at(40)), "gates": [
            {"name": "ready", "checks": 2, "answers": [
                {"check": 1, "at": "2026-03-01T11:59:20Z", "yes": False, "said": "not yet"}]}]},
        "pool": {"name": "gpu", "since": iso(at(10))},
    }  # fmt: skip
    waits = runview.waits(detail("WAITING", 0, reason="pool", checks=checks), "UTC", NOW)
    assert [(w.what, w.until) for w in waits] == [
        ("its upstreams", "released after 1 min 00 s"),
        ("its gates", "not met; went on (on_unmet: run), now waits for its pool"),
        ("a place in pool gpu", "still waiting"),
    ]
    assert waits[0].lines == ["p/up succeeded (filed 2026-03-01T11:59:00Z)"]
    assert waits[1].lines == ["gate ready check 1 at 2026-03-01T11:59:20Z: no, not yet"]
    assert waits[2].since is not None and waits[2].since.ago == "10 s ago"
    skipped = runview.waits(detail("SKIPPED", 0, checks={"gate": checks["gate"]}), "UTC", NOW)
    assert skipped[0].until == "not met: SKIPPED"
    # max_wait ran out and on_unmet: run started it: the wait records a release all the
    # same, and an upstream not met.
    unmet = {**checks, "upstream": [{**checks["upstream"][0], "met": False, "since": "a",
                                     "until": "b", "last_success": None}]}  # fmt: skip
    started = runview.waits(detail("RUNNING", 1, started_at=at(40), checks=unmet), "UTC", NOW)
    assert started[0].until == "not met; started anyway (on_unmet: run)"
    assert started[0].lines == ["p/up has no success filed from a to b (last success: never)"]


def test_a_retry_is_due_in_words() -> None:
    assert jobview.due_in(NOW + timedelta(seconds=30), NOW) == "in 30 s"
    assert jobview.due_in(NOW - timedelta(seconds=3), NOW) == "due now"


@pytest.mark.parametrize(
    ("value", "top"),
    [(0, 0.001), (0.0004, 0.001), (0.0012, 0.002), (0.3, 0.5), (1, 1), (7, 10), (55, 60),
     (61, 120), (250, 300), (3599, 3600), (3700, 7200), (50000, 86400), (90000, 172800),
     (10**6, 1728000), (10**7, 17280000)],
)  # fmt: skip
def test_a_charts_scale_ends_at_a_round_figure(value: float, top: float) -> None:
    assert chart.nice_ceiling(value) == pytest.approx(top)


def timing(run: int, took: float | None, lag: float | None, status: str = "SUCCEEDED") -> Timing:
    due = at(1000 - run)
    started = None if lag is None else due + timedelta(seconds=lag)
    finished = None if took is None or started is None else started + timedelta(seconds=took)
    return Timing(run, status, due, started, started, finished)


def test_a_chart_draws_each_run_to_scale_newest_on_the_right() -> None:
    newest_first = [timing(3, 1.0, 0.1), timing(2, None, None, "SKIPPED"), timing(1, 4.0, 0.2)]
    took, lag = chart.charts(newest_first, "UTC", lambda run: f"/runs/{run}")
    svg = str(took.svg)
    bars = re.findall(r'<a href="/runs/(\d)" tabindex="-1"><title>[^<]+</title><rect'
                      r' class="s-\w+" x="([\d.]+)" y="[\d.]+" width="[\d.]+"'
                      r' height="([\d.]+)"/></a>', svg)  # fmt: skip
    assert [run for run, _, _ in bars] == ["1", "3"]  # the skipped run has no bar
    (_, x1, h1), (_, x3, h3) = bars
    assert float(x1) < float(x3) and float(h1) == pytest.approx(4 * float(h3), rel=0.01)
    assert ">5 s</text>" in svg  # the scale's top, in its one unit
    assert took.summary.endswith("2 of the last 3 runs: median 2.5 s, largest 4.0 s")
    assert lag.summary.endswith("median 150 ms, largest 200 ms")


def test_no_chart_for_a_measure_no_run_has() -> None:
    assert chart.charts([timing(1, None, None, "SKIPPED")], "UTC", str) == []
    waiting = Timing(1, "RUNNING", at(10), at(9), at(9), None)
    [lag] = chart.charts([waiting], "UTC", str)
    assert lag.name == "lag"


def test_a_charts_titles_are_text_not_markup() -> None:
    [took, _] = chart.charts([timing(1, 1.0, 0.1, "<b>")], "UTC", lambda run: '"/x?a=1&b=2')
    assert "<b>" not in str(took.svg) and "&lt;b&gt;" in str(took.svg)
    assert 'href="&#34;/x?a=1&amp;b=2"' in str(took.svg)


def test_a_spec_reads_as_the_yaml_a_job_file_writes() -> None:
    spec = {"schedule": "every 5s", "timezone": "UTC", "noop": {"fail": False, "sleep": 0.3},
            "retries": {"max_attempts": 3, "backoff": 30}, "requires": ["a", "b"]}  # fmt: skip
    lines = dict(jobview.spec_summary(spec, "noop"))
    assert lines["noop"] == "{sleep: 0.3}"  # fail: false is the default: not written
    assert (
        dict(jobview.spec_summary(spec | {"noop": {"fail": False, "sleep": 0.0}}, "noop"))["noop"]
        == "{}"
    )  # noop: {} as written
    assert lines["retries"] == "{max_attempts: 3, backoff: 30}"
    assert lines["requires"] == "[a, b]"
