"""``paused`` in a job spec (issue 19: a task disabled in django-celery-beat is imported
as a paused job): the file's pause is applied when the spec changes, and an operator's
own pause or resume stands until it does."""

from __future__ import annotations

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec

pytestmark = pytest.mark.postgres

REASON = "disabled in django-celery-beat"


def job(**controls: object) -> JobSpec:
    return JobSpec("etl", "nightly", "0 2 * * *", controls=controls)


def state(sched: Scheduler) -> tuple[str, bool, str | None]:
    (row,) = sched.jobs()
    return row["state"], row["paused"], row.get("pause_reason")


def test_a_job_declared_paused_is_created_paused_with_its_reason(engine: Engine):
    sched = Scheduler(engine)
    assert sched.apply([job(paused=REASON)], project="etl").created == ["etl/nightly"]
    assert state(sched) == ("SUSPENDED", True, REASON)


def test_taking_paused_out_of_the_spec_resumes_the_job(engine: Engine):
    sched = Scheduler(engine)
    sched.apply([job(paused=True)], project="etl")
    assert sched.apply([job()], project="etl").updated == ["etl/nightly"]
    assert state(sched)[:2] == ("SCHEDULED", False)


def test_an_operators_pause_and_resume_stand_until_the_spec_changes(engine: Engine):
    sched = Scheduler(engine)
    sched.apply([job()], project="etl")
    sched.pause("etl/nightly", "maintenance")
    assert sched.apply([job()], project="etl").unchanged == ["etl/nightly"]
    assert state(sched)[:2] == ("SUSPENDED", True)  # a spec without paused does not resume it
    sched.resume("etl/nightly")
    sched.apply([job(paused=REASON)], project="etl")
    sched.resume("etl/nightly")
    assert sched.apply([job(paused=REASON)], project="etl").unchanged == ["etl/nightly"]
    assert state(sched)[:2] == ("SCHEDULED", False)


def test_paused_false_is_the_default_and_keeps_the_revision():
    assert job(paused=False).revision == job().revision
    assert job(paused=True).revision != job().revision


def test_celery_priority_and_expires_are_kept_only_when_given():
    plain = JobSpec("etl", "t", "@daily", kind="celery", options={"task": "t"})
    both = JobSpec(
        "etl", "t", "@daily", kind="celery", options={"task": "t", "priority": 3, "expires": "5m"}
    )
    assert "priority" not in plain.options and "expires" not in plain.options
    assert (both.options["priority"], both.options["expires"]) == (3, 300.0)


def test_a_changed_spec_that_still_says_paused_pauses_again(engine: Engine):
    sched = Scheduler(engine)
    sched.apply([job(paused=REASON)], project="etl")
    sched.resume("etl/nightly")  # an operator starts it by hand
    changed = JobSpec("etl", "nightly", "0 3 * * *", controls={"paused": REASON})
    assert sched.apply([changed], project="etl").updated == ["etl/nightly"]
    assert state(sched) == ("SUSPENDED", True, REASON)


def test_taking_paused_out_does_not_lift_an_operators_own_pause(engine: Engine):
    sched = Scheduler(engine)
    sched.apply([job(paused=REASON)], project="etl")
    sched.resume("etl/nightly")
    sched.pause("etl/nightly", "incident 42")  # paused again, by an operator, for a reason
    assert sched.apply([job()], project="etl").updated == ["etl/nightly"]
    assert state(sched) == ("SUSPENDED", True, "incident 42")
