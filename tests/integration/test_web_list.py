"""The jobs list as a dashboard: filters by project, state and last outcome and a text
search, all in the URL; sorting; pages with counts both ways; the last outcome, a
pause's reason and an overdue tick said in the row."""

from __future__ import annotations

import re

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.web import views
from tests.support.deliver import deliver_runs, deliver_ticks_and_starts
from tests.support.engine import Clock, RecordingPort
from tests.support.web import client


def listed(engine: Engine, clock: Clock, path: str) -> list[str]:
    """The jobs a page lists, in its order."""
    answer = client(engine, clock).get(path)
    assert answer.status_code == 200, answer.text
    return re.findall(r'<tr class="job">\s*<td><a href="/jobs/[^"]+">([^<]+)</a>', answer.text)


def text_of(engine: Engine, clock: Clock, path: str) -> str:
    answer = client(engine, clock).get(path)
    assert answer.status_code == 200, answer.text
    return answer.text


@pytest.fixture
def mixed(engine: Engine, port: RecordingPort, clock: Clock) -> Engine:
    """``etl/load`` succeeds, ``etl/bad_one`` fails, ``ml/train`` never runs (triggered)
    and ``ml/Nightly_5.0`` is paused with a reason."""
    scheduler = Scheduler(engine)
    scheduler.apply(
        [
            JobSpec("etl", "load", "every 10s", kind="noop"),
            JobSpec("etl", "bad_one", "every 10s", kind="noop", options={"fail": True}),
        ],
        project="etl",
    )
    scheduler.apply(
        [
            JobSpec("ml", "train", "triggered", kind="noop"),
            JobSpec("ml", "Nightly_5.0", "0 2 * * *", kind="noop"),
        ],
        project="ml",
    )
    scheduler.pause("ml/Nightly_5.0", reason="waiting for <the> new cluster")
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    deliver_runs(engine, port)
    return engine


def test_each_filter_narrows_the_rows(mixed: Engine, clock: Clock):
    every = ["etl/bad_one", "etl/load", "ml/Nightly_5.0", "ml/train"]
    assert listed(mixed, clock, "/") == every
    assert listed(mixed, clock, "/?outcome=failed") == ["etl/bad_one"]
    assert listed(mixed, clock, "/?outcome=succeeded") == ["etl/load"]
    assert listed(mixed, clock, "/?outcome=never") == ["ml/Nightly_5.0", "ml/train"]
    assert listed(mixed, clock, "/?state=SUSPENDED") == ["ml/Nightly_5.0"]
    assert listed(mixed, clock, "/?project=ml&outcome=never&state=SCHEDULED") == ["ml/train"]
    # The search: any case, in project/name, its % and _ plain characters (no wildcards).
    assert listed(mixed, clock, "/?q=NIGHTLY") == ["ml/Nightly_5.0"]
    assert listed(mixed, clock, "/?q=l/t") == ["ml/train"]
    assert listed(mixed, clock, "/?q=_") == ["etl/bad_one", "ml/Nightly_5.0"]
    assert listed(mixed, clock, "/?q=%25") == []
    none = text_of(mixed, clock, "/?q=nothing-like-it&project=etl")
    assert "no jobs in project etl match these filters" in none
    assert '<a href="/">show every job</a>' in none


def test_a_row_says_its_last_outcome_its_pause_and_an_overdue_tick(mixed: Engine, clock: Clock):
    text = text_of(mixed, clock, "/")
    rows = dict(re.findall(r'<a href="/jobs/[^"]+">([^<]+)</a></td>(.*?)</tr>', text, re.S))
    assert '<span class="o-failed">failed</span>' in rows["etl/bad_one"]
    assert '<span class="o-succeeded">succeeded</span>' in rows["etl/load"]
    assert "never ran" in rows["ml/train"]
    assert "paused: waiting for &lt;the&gt; new cluster" in rows["ml/Nightly_5.0"]
    assert "overdue" not in text.split("<tbody>")[1].split("</tbody>")[0]
    clock.advance(60)  # nobody delivered the next ticks: 50 s past their slots
    late = text_of(mixed, clock, "/")
    rows = dict(re.findall(r'<a href="/jobs/[^"]+">([^<]+)</a></td>(.*?)</tr>', late, re.S))
    assert [ref for ref, row in rows.items() if 'class="overdue"' in row] == [
        "etl/bad_one",
        "etl/load",
    ]


def test_sorts_order_the_rows(mixed: Engine, clock: Clock):
    assert listed(mixed, clock, "/?sort=failure")[0] == "etl/bad_one"
    assert listed(mixed, clock, "/?sort=success")[0] == "etl/load"
    by_tick = listed(mixed, clock, "/?sort=next")
    assert by_tick[:2] == ["etl/bad_one", "etl/load"] and by_tick[-2:] == [
        "ml/Nightly_5.0",  # paused: no tick, last
        "ml/train",  # triggered: none either
    ]


def test_pages_count_and_link_both_ways(
    engine: Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(views, "PAGE", 4)
    jobs = [JobSpec("p", f"j{i:02d}", "triggered", kind="noop") for i in range(10)]
    Scheduler(engine).apply(jobs, project="p")

    def follow(text: str, rel: str) -> str:
        link = re.search(rf'rel="{rel}" href="([^"]+)"', text)
        assert link is not None, rel
        return text_of(engine, clock, link.group(1).replace("&amp;", "&"))

    first = text_of(engine, clock, "/?q=j")
    assert "jobs 1–4 of 10" in first and "page 1 of 3" in first and 'rel="prev"' not in first
    assert re.search(r'rel="next" href="[^"]*q=j', first)  # the filter goes with the page
    second = follow(first, "next")  # from the last job it listed: the name's index
    assert "jobs 5–8 of 10" in second
    last = follow(second, "next")
    assert "jobs 9–10 of 10" in last and 'rel="next"' not in last
    back = follow(last, "prev")  # to the jobs before the first it listed
    assert "jobs 5–8 of 10" in back and "p/j04" in back and "p/j08" not in back
    # A page typed by hand is counted from the first; past the end, the last one.
    assert listed(engine, clock, "/?q=j&page=3") == ["p/j08", "p/j09"]
    assert listed(engine, clock, "/?q=j&page=99") == ["p/j08", "p/j09"]
    # Other orders page by count: the next tick's.
    by_tick = text_of(engine, clock, "/?sort=next")
    assert "after=" not in by_tick and "jobs 1–4 of 10" in by_tick
    assert "jobs 5–8 of 10" in follow(by_tick, "next")


@pytest.mark.parametrize(
    "query",
    ["state=NOPE", "outcome=maybe", "sort=size", "page=0", "page=-1", "page=x", "after=p",
     "before=%00/x"],
)  # fmt: skip
def test_a_filter_no_link_makes_is_refused(engine: Engine, clock: Clock, query: str):
    answer = client(engine, clock).get(f"/?{query}")
    assert answer.status_code == 400
