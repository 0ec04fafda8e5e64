"""What ``apply`` and the jobs folder refuse on real databases (issue 14): cycles of
triggers, within a project and across projects, and two files claiming one project; and
that each file of a folder is applied or refused on its own."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import update

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.declare import apply as declarative
from cronchain.scheduler.declare.apply import reconcile_folder
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Call, Outcome
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.models import jobs
from tests.support.deliver import deliver_starts, deliver_ticks
from tests.support.engine import Clock, RecordingPort

pytestmark = pytest.mark.postgres


def triggered(project: str, name: str, *targets: str) -> JobSpec:
    controls = {"triggers": list(targets)} if targets else {}
    return JobSpec(project, name, "triggered", controls=controls)


def test_jobs_that_trigger_each_other_are_refused_and_nothing_is_written(engine: Engine):
    sched = Scheduler(engine)
    with pytest.raises(SpecError) as err:
        sched.apply([triggered("p", "a", "b"), triggered("p", "b", "a")], project="p")
    assert str(err.value) == (
        "job 'a': triggers: the jobs trigger each other in a cycle: p/a -> p/b -> p/a"
    )
    assert sched.jobs() == []


def test_a_chain_is_not_a_cycle(engine: Engine):
    sched = Scheduler(engine)
    specs = [triggered("p", "a", "b", "c"), triggered("p", "b", "c"), triggered("p", "c")]
    assert sched.apply(specs, project="p").created == ["p/a", "p/b", "p/c"]


def test_a_cycle_across_projects_is_refused_by_the_apply_that_would_close_it(engine: Engine):
    sched = Scheduler(engine)
    sched.apply([triggered("etl", "load", "ml/train")], project="etl")
    sched.apply([triggered("ml", "train", "report")], project="ml")
    sched.apply([triggered("ml", "train", "report"), triggered("ml", "report")], project="ml")
    with pytest.raises(
        SpecError, match=r"job .train.: .*ml/train -> ml/report -> etl/load -> ml/train$"
    ):
        sched.apply(
            [triggered("ml", "train", "report"), triggered("ml", "report", "etl/load")],
            project="ml",
        )
    assert "ml/report" in {j["id"] for j in sched.jobs() if j["enabled"]}
    # A disabled job's edges do not count: once etl/load is gone, the edge is fine.
    sched.apply([], project="etl")
    sched.apply(
        [triggered("ml", "train", "report"), triggered("ml", "report", "etl/load")],
        project="ml",
    )


def write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text)


def test_a_second_file_claiming_a_project_is_refused(engine: Engine, tmp_path: Path):
    write(tmp_path, "a.yaml", "project: p\njobs:\n  - {name: a, schedule: every 10s, noop: {}}\n")
    write(tmp_path, "b.yaml", "project: p\njobs:\n  - {name: b, schedule: every 10s, noop: {}}\n")
    for _ in range(2):  # neither pass disables the other file's jobs
        report = reconcile_folder(engine, tmp_path)
        assert "a.yaml" in report.applied
        assert report.failed["b.yaml"].endswith(
            "b.yaml: project: 'p' is declared by a.yaml already; a project belongs to one file"
        )
    jobs = {j["id"]: j["enabled"] for j in Scheduler(engine).jobs()}
    assert jobs == {"p/a": True}


def test_a_file_that_fails_while_applied_does_not_stop_the_files_after_it(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    real_apply = declarative.apply

    def apply(
        engine: Engine, project: str, specs: list[JobSpec], **options: Any
    ) -> declarative.ApplyReport:
        if project == "b":  # a failure no validation caught, in the middle of the pass
            raise OverflowError("a bug in one file's apply")
        return real_apply(engine, project, specs, **options)

    monkeypatch.setattr(declarative, "apply", apply)
    for name in "abc":
        job = f"  - {{name: {name}, schedule: every 10s, noop: {{}}}}\n"
        write(tmp_path, f"{name}.yaml", f"project: {name}\njobs:\n{job}")
    report = reconcile_folder(engine, tmp_path)
    assert sorted(report.applied) == ["a.yaml", "c.yaml"]
    assert report.failed == {"b.yaml": "OverflowError: a bug in one file's apply"}


class Failing:
    """A work-path invoker whose every attempt fails, so that retries are scheduled."""

    def invoke(self, call: Call) -> Outcome:
        return Outcome.failed("failed on purpose")


LARGEST = {
    "schedule_to_start": "366d",
    "lease": "366d",
    "timeout": "366d",
    "retries": {"max_attempts": 100, "backoff": "366d", "max_backoff": "366d", "jitter": 1},
    "overlap": "buffer_all",
    "max_buffered": 10_000,
    "misfire": "all",
    "misfire_grace": "366d",
    "catchup_limit": 10_000,
}


def test_the_largest_value_of_every_control_is_stored_and_runs(
    db: sqlalchemy.Engine, port: RecordingPort, clock: Clock
):
    """Each bound is one a run can live with on both databases: the deadlines a claim
    computes, a retry 30 days out, the watchdog's pass over them."""
    engine = Engine(db, port, {"noop": Failing()}, grace=timedelta(seconds=15), clock=clock)
    spec = JobSpec("p", "a", "every 10s", controls=LARGEST)
    Scheduler(engine).apply([spec], project="p")
    clock.advance(10)
    deliver_ticks(engine, port)
    deliver_starts(engine, port)
    waiting = Scheduler(engine).invocation(1)
    assert (waiting["status"], waiting["attempt"]) == ("STARTING", 1)
    retry_at = datetime.fromisoformat(waiting["start_at"])
    assert timedelta(0) < retry_at - clock() <= timedelta(days=732)  # 366d, jitter 1
    clock.now = retry_at + timedelta(seconds=1)
    watchdog.run_once(engine)
    deliver_starts(engine, port)
    again = Scheduler(engine).invocation(1)
    assert [a["attempt"] for a in again["attempts"]] == [1, 2]


BOMB = "project: p\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)  # nine levels of ten: 10**9 nodes once expanded, in about 400 bytes


def test_a_file_of_multiplying_aliases_is_refused_at_once_everywhere(
    engine: Engine, tmp_path: Path
):
    """Through the Python API and the jobs folder alike: refused before it is expanded,
    nothing written, and the folder's other files still applied."""
    write(tmp_path, "a.yaml", BOMB)
    write(tmp_path, "b.yaml", "project: q\njobs:\n  - {name: b, schedule: every 10s, noop: {}}\n")
    started = time.perf_counter()
    with pytest.raises(SpecError, match=r"a\.yaml: file: line \d+ column \d+: aliases expand"):
        Scheduler(engine).apply(tmp_path / "a.yaml")
    report = reconcile_folder(engine, tmp_path)
    assert time.perf_counter() - started < 5  # expanded, it would take hours and terabytes
    assert "aliases expand" in report.failed["a.yaml"]
    assert [j["id"] for j in Scheduler(engine).jobs()] == ["q/b"]


@pytest.mark.parametrize("stored", ["0 3 15W * *", "0 0 * * L5", "every 500ms"])
def test_a_schedule_stored_before_the_dialect_still_runs_and_can_be_retired(
    engine: Engine, port: RecordingPort, clock: Clock, stored: str
):
    """An upgrade must not stop a job whose schedule an earlier cronchain accepted: its
    ticks, the watchdog's pass and the apply that disables it all still work."""
    sched = Scheduler(engine)
    sched.apply([JobSpec("p", "old", "every 10s"), JobSpec("p", "new", "every 10s")], project="p")
    with engine.db.begin() as conn:  # as an earlier version stored it
        conn.execute(update(jobs).where(jobs.c.name == "old").values(schedule=stored))
    with pytest.raises(SpecError, match="schedule"):
        JobSpec("p", "old", stored)  # while apply refuses it
    clock.advance(86400 * 40)
    report = watchdog.run_once(engine)
    assert report.ticks == 2  # both lapsed jobs repaired, the stored one included
    deliver_ticks(engine, port)
    assert sorted(sched.apply([], project="p").disabled) == ["p/new", "p/old"]


def test_a_file_that_stops_loading_keeps_its_project(engine: Engine, tmp_path: Path):
    write(tmp_path, "a.yaml", "project: p\njobs:\n  - {name: a, schedule: every 10s, noop: {}}\n")
    write(tmp_path, "b.yaml", "project: p\njobs:\n  - {name: b, schedule: every 10s, noop: {}}\n")
    reconcile_folder(engine, tmp_path)
    write(tmp_path, "a.yaml", "project: p\njobs:\n  - {name: a, schedule: every 10s, noop: {}\n")
    report = reconcile_folder(engine, tmp_path)  # a.yaml has a typo: b.yaml must not take p
    assert "not valid YAML" in report.failed["a.yaml"]
    assert "declared by a.yaml already" in report.failed["b.yaml"]
    assert {j["id"]: j["enabled"] for j in Scheduler(engine).jobs()} == {"p/a": True}
