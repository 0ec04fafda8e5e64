"""``@periodic`` (issue 19): jobs declared on Celery tasks, applied by ``cronchain apply
--app MODULE:APP`` and by beat's reconcile as a job file's are, on a real database."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from celery import Celery, beat
from celery.signals import beat_init
from sqlalchemy import select

from cronchain.scheduler import periodic
from cronchain.scheduler.declare.periodic import declared_jobs
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import ConfigError, SpecError
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.spec.jobspec import load_job_file
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import jobs
from cronchain.scheduler.workers import runtime
from tests.support.cli import Cli, cli_runner
from tests.support.engine import Clock, RecordingPort
from tests.support.rows import parked
from tests.support.wait import wait_until

pytestmark = pytest.mark.postgres

ETL = """
from celery import Celery

from cronchain.scheduler import periodic

app = Celery("etl")
app.conf.task_routes = {"etl.hourly": {"queue": "etl-hourly"}}


@periodic("0 2 * * *", timezone="Europe/Berlin", project="etl", retries={"max_attempts": 3})
@app.task(name="etl.nightly")
def nightly():
    return "done"


#HOURLY#
@app.task(name="etl.hourly")
def hourly(day="today"):
    return day
"""
HOURLY = '@periodic("every 1h", lease="2m", kwargs={"day": "yesterday"})'
# The same two jobs as a job file: a file and the app must give them one revision.
ETL_FILE = """
project: etl
jobs:
  - name: etl.hourly
    schedule: every 1h
    lease: 2m
    celery: {task: etl.hourly, queue: etl-hourly, kwargs: {day: yesterday}}
  - name: etl.nightly
    schedule: "0 2 * * *"
    timezone: Europe/Berlin
    retries: {max_attempts: 3}
    celery: {task: etl.nightly}
"""
IDS = "etl/etl.hourly, etl/etl.nightly"


def module(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def etl_module(folder: Path, name: str = "etl_tasks", *, hourly: bool = True) -> Path:
    return module(folder, name, ETL.replace("#HOURLY#", HOURLY if hourly else ""))


@pytest.fixture
def cli(pg_url: str, tmp_path: Path) -> Iterator[Cli]:
    """``cronchain`` as an operator runs it, in a folder holding the app's module."""
    env = dict(
        os.environ,
        CRONCHAIN_DATABASE_URL=pg_url,
        CRONCHAIN_HOME=str(tmp_path / "home"),
        PYTHONDONTWRITEBYTECODE="1",  # a module rewritten within a second is read again
    )
    env.pop("CRONCHAIN_BROKER_URL", None)  # messages go to the embedded filesystem broker

    with cli_runner(env, tmp_path) as run:
        yield run


@pytest.fixture
def db(pg_url: str) -> Iterator[sqlalchemy.Engine]:
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


def job_rows(db: sqlalchemy.Engine) -> dict[str, dict[str, Any]]:
    with db.connect() as conn:
        found = conn.execute(select(jobs)).mappings().all()
    return {f"{r['project']}/{r['name']}": dict(r) for r in found}


def report(prefix: str = "", **names: str) -> str:
    """The lines ``apply -v`` prints, as for a file: ``report(created=IDS)``."""
    lines = []
    for what in ("created", "updated", "disabled", "unchanged"):
        listed = names.get(what, "").split(", ") if names.get(what) else []
        lines += [f"{prefix}{what}: {len(listed)}", *(f"  {name}" for name in listed)]
    return "\n".join(lines) + "\n"


def test_an_apps_jobs_are_applied_as_a_files_are(cli: Cli, db: sqlalchemy.Engine, tmp_path: Path):
    etl_module(tmp_path)
    assert cli("apply", "-v", "--app", "etl_tasks:app", "--dry-run").stdout == report(
        "would be ", created=IDS
    )
    assert job_rows(db) == {}
    assert cli("apply", "-v", "--app", "etl_tasks:app").stdout == report(created=IDS)

    stored = job_rows(db)
    nightly, hourly = stored["etl/etl.nightly"], stored["etl/etl.hourly"]
    when = [(j["kind"], j["schedule"], j["timezone"]) for j in (nightly, hourly)]
    assert when == [("celery", "0 2 * * *", "Europe/Berlin"), ("celery", "every 1h", "UTC")]
    # nightly: the app's default queue (no route names it); hourly: its task_routes
    celery = {"task": "etl.nightly", "queue": "celery", "args": [], "kwargs": {}}
    assert (nightly["spec"]["celery"], nightly["spec"]["retries"]) == (celery, {"max_attempts": 3})
    celery = {
        "task": "etl.hourly",
        "queue": "etl-hourly",
        "args": [],
        "kwargs": {"day": "yesterday"},
    }
    assert (hourly["spec"]["celery"], hourly["spec"]["lease"]) == (celery, 120.0)
    assert all(job["enabled"] and job["state"] == "SCHEDULED" for job in stored.values())

    # The same jobs in a job file have the same revisions: the file changes nothing.
    (tmp_path / "etl.yaml").write_text(ETL_FILE)
    declared = {spec.id: spec.revision for spec in load_job_file(tmp_path / "etl.yaml").jobs}
    assert declared == {ref: job["revision"] for ref, job in stored.items()}
    assert cli("apply", "-v", "etl.yaml", "--dry-run").stdout == report("would be ", unchanged=IDS)

    assert cli("apply", "-v", "--app", "etl_tasks:app").stdout == report(unchanged=IDS)
    assert job_rows(db) == stored  # not even updated_at

    etl_module(tmp_path, hourly=False)  # the task stays; its @periodic is gone
    out = cli("apply", "-v", "--app", "etl_tasks:app", "--dry-run").stdout
    assert out == report("would be ", disabled="etl/etl.hourly", unchanged="etl/etl.nightly")
    assert job_rows(db) == stored
    out = cli("apply", "-v", "--app", "etl_tasks:app").stdout
    assert out == report(disabled="etl/etl.hourly", unchanged="etl/etl.nightly")
    after = job_rows(db)
    assert not after["etl/etl.hourly"]["enabled"]
    assert after["etl/etl.nightly"] == nightly


MULTI = """
from celery import Celery

from cronchain.scheduler import periodic

app = Celery("etl")


@periodic("every 1h")
@periodic("every 1d", name="daily")
@app.task(name="etl.load")
def load():
    pass


@periodic("*/5 * 1-7 * mon", project="ml", name="train", overlap="buffer_one", days="both")
@app.task(name="ml.train")
def train():
    pass
"""


def test_each_project_of_an_app_is_applied_and_one_may_be_chosen(
    cli: Cli, db: sqlalchemy.Engine, tmp_path: Path
):
    module(tmp_path, "multi", MULTI)
    out = cli("apply", "-v", "--app", "multi:app").stdout
    assert out == report("etl: ", created="etl/daily, etl/etl.load") + report(
        "ml: ", created="ml/train"
    )
    assert job_rows(db)["ml/train"]["spec"]["overlap"] == "buffer_one"
    assert job_rows(db)["ml/train"]["spec"]["days"] == "both"  # the first Monday of a month
    assert cli("apply", "-v", "--app", "multi:app", "--project", "ml").stdout == report(
        unchanged="ml/train"
    )

    # A project no task declares is refused, not applied empty: that would disable
    # every job of it.
    err = cli("apply", "--app", "multi:app", "--project", "nosuch", code=2).stderr
    assert err == (
        "cronchain: project: no job of app 'multi:app' declares project 'nosuch'; applying"
        " none would disable all of its jobs\n"
    )
    module(tmp_path, "multi", MULTI.replace('@periodic("*/5', '# @periodic("*/5'))
    cli("apply", "--app", "multi:app", "--project", "ml", code=2)
    assert "ml: " not in cli("apply", "--app", "multi:app").stdout  # one project: no prefix
    assert job_rows(db)["ml/train"]["enabled"]

    module(tmp_path, "multi", MULTI.replace('@periodic("every 1d", name="daily")', ""))
    out = cli("apply", "-v", "--app", "multi:app", "--prune").stdout
    assert "etl: deleted: 1\n  etl/daily\n" in out
    assert set(job_rows(db)) == {"etl/etl.load", "ml/train"}


def test_an_app_that_does_not_load_is_one_line_and_exit_2(cli: Cli, tmp_path: Path):
    done = cli("apply", "--app", "nosuch:app", code=2)
    assert done.stderr == (
        "cronchain: app: cannot load the Celery app 'nosuch:app': No module named 'nosuch'\n"
    )
    assert done.stdout == ""
    etl_module(tmp_path)
    err = cli("apply", "etl.yaml", "--app", "etl_tasks:app", code=2).stderr
    assert err == "cronchain: apply: give a FILE or --app MODULE:APP (one of them)\n"
    cli("apply", code=2)
    module(tmp_path, "empty", "from celery import Celery\napp = Celery('empty')\n")
    assert "'empty:app' declares no job" in cli("apply", "--app", "empty:app", code=2).stderr


def test_a_bad_declaration_fails_the_import_that_makes_it(cli: Cli, tmp_path: Path):
    path = module(tmp_path, "bad_schedule", ETL.replace("#HOURLY#", '@periodic("99 * * * *")'))
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(SpecError) as raised:
            importlib.import_module("bad_schedule")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("bad_schedule", None)
    line = path.read_text().splitlines().index('@periodic("99 * * * *")') + 1
    assert raised.value.field == "schedule"
    assert str(raised.value).startswith(f"@periodic at bad_schedule.py:{line}: schedule: ")
    err = cli("apply", "--app", "bad_schedule:app", code=2).stderr
    assert err.startswith(f"cronchain: @periodic at bad_schedule.py:{line}: schedule: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "options, field",
    [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"retries": {"max_attempts": 0}}, "retries.max_attempts"),
        ({"lease": "0s"}, "lease"),
        ({"retires": 3}, "retires"),
        ({"name": "a/b"}, "name"),
        ({"project": ""}, "project"),
        ({"queue": ""}, "celery.queue"),
        ({"kwargs": {"at": datetime(2026, 1, 1)}}, "celery.kwargs"),
        ({"args": "abc"}, "args"),
        ({"days": "both"}, "days"),  # a cron schedule's only
    ],
)
def test_each_bad_value_is_refused_by_name(options: dict[str, Any], field: str):
    with pytest.raises(SpecError) as raised:
        periodic("every 1h", **options)
    assert raised.value.field == field


def test_a_declaration_the_app_cannot_name_is_refused():
    def body() -> None:
        pass

    with pytest.raises(SpecError, match="put it above @app.task, not on a function"):
        periodic("every 1h")(body)

    app = Celery("refusals", set_as_current=False)
    task = periodic("every 1h")(app.task(name="odd:name", shared=False)(body))
    with pytest.raises(SpecError, match="this task has another @periodic of that name"):
        periodic("every 2h")(task)
    assert periodic("every 2h", name="odd")(task) is task  # a name of its own: taken
    app.finalize()
    with pytest.raises(SpecError, match=r"task name 'odd:name' is not a job name .*: pass name="):
        declared_jobs(app)

    nameless = Celery(set_as_current=False)
    periodic("every 1h")(nameless.task(name="x.y", shared=False)(body))
    nameless.finalize()
    with pytest.raises(SpecError, match=r"project: the app's name .* pass project="):
        declared_jobs(nameless)


RECONCILED = """
from celery import Celery

from cronchain.scheduler import periodic

app = Celery("etl")
other = Celery("other")  # another app of the same module: its jobs are not app's


@periodic("every 1h", retries={"max_attempts": 2})
@app.task(name="etl.load")
def load():
    pass


@periodic("every 1d", project="shared")
@app.task(name="etl.report")
def report():
    pass


@periodic("every 1h")
@other.task(name="other.task", shared=False)
def other_task():
    pass
"""


def test_the_reconcile_task_applies_the_apps_of_cronchain_apps(
    db: sqlalchemy.Engine, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Beat's reconcile applies each project of each app on its own: an app that does
    not load is reported and the others still apply, and a project that a file of the
    jobs folder declares is the file's."""
    from cronchain.tasks.chain import reconcile

    module(tmp_path, "reconciled_tasks", RECONCILED)
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "shared.yaml").write_text(
        "project: shared\njobs:\n  - {name: ping, schedule: every 5s, noop: {}}\n"
    )
    env = {
        "CRONCHAIN_DATABASE_URL": pg_url,
        "CRONCHAIN_JOBS_DIR": str(folder),
        "CRONCHAIN_APPS": "nosuch_module:app, reconciled_tasks:app",
    }
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=Clock())
    rt = runtime.Runtime(Settings.from_env(env), engine)
    monkeypatch.setattr(runtime, "_current", (os.getpid(), rt))

    imported = importlib.import_module("reconciled_tasks")
    assert not imported.load.__evaluated__()  # @periodic left the promise alone

    done = reconcile.run()
    assert set(done["failed"]) == {"nosuch_module:app", "reconciled_tasks:app: shared"}
    assert "cannot load the Celery app 'nosuch_module:app'" in done["failed"]["nosuch_module:app"]
    assert (
        "'shared' is declared by shared.yaml already"
        in done["failed"]["reconciled_tasks:app: shared"]
    )
    assert done["changed"] == {
        "shared.yaml": {"created": ["shared/ping"], "updated": [], "disabled": []},
        "reconciled_tasks:app: etl": {"created": ["etl/etl.load"], "updated": [], "disabled": []},
    }
    stored = job_rows(db)
    assert set(stored) == {"shared/ping", "etl/etl.load"}  # not other's, not etl.report
    assert stored["etl/etl.load"]["spec"]["retries"] == {"max_attempts": 2}
    # Each first tick is sent, but etl.load's, an hour away: parked until it is near.
    assert {job_id for job_id, _, _ in port.ticks} == {stored["shared/ping"]["id"]}
    assert parked(stored["etl/etl.load"])
    assert not imported.other_task.__evaluated__()  # another app's promise: left alone
    assert imported.app.tasks["etl.load"] is imported.load._get_current_object()

    again = reconcile.run()
    assert (again["applied"], again["changed"]) == (2, {})
    assert job_rows(db) == stored


def test_cronchain_apps_is_a_list_of_apps():
    settings = Settings.from_env({"CRONCHAIN_APPS": "etl.celery:app, jobs , etl.celery:app"})
    assert settings.apps == ("etl.celery:app", "jobs")
    assert Settings.from_env({}).apps == ()
    for bad in ("etl-app:app", "etl:app:x", "etl:", "two words"):
        with pytest.raises(ConfigError) as raised:
            Settings.from_env({"CRONCHAIN_APPS": bad})
        assert raised.value.field == "CRONCHAIN_APPS"
        assert str(raised.value).startswith("CRONCHAIN_APPS: must be comma-separated Celery apps")


def test_beat_makes_the_reconcile_due_as_it_starts(tmp_path: Path):
    """Celery sends an interval entry one interval after beat adds it (or after its last
    run, kept in the schedule file); cronchain's reconcile goes out at beat's start."""
    import cronchain.tasks.chain  # noqa: F401  (connects the handler, as beat's -A tasks does)

    app = Celery("beat-test", set_as_current=False)
    entry = {"task": "cronchain.reconcile", "schedule": 3600.0}
    app.conf.beat_schedule = {"cronchain-reconcile": entry, "other": {**entry, "task": "x"}}
    service = beat.Service(app, schedule_filename=str(tmp_path / "schedule"))
    try:
        schedule = service.scheduler.schedule
        assert not schedule["cronchain-reconcile"].is_due().is_due  # Celery's own rule
        beat_init.send(sender=service)
        assert schedule["cronchain-reconcile"].is_due().is_due
        assert not schedule["other"].is_due().is_due
    finally:
        service.scheduler.close()


def test_a_real_beat_sends_the_reconcile_at_start_with_cronchain_apps_alone(tmp_path: Path):
    """``celery -A cronchain.tasks beat`` with ``CRONCHAIN_APPS`` set (no jobs folder) schedules the
    reconcile, and sends it as it starts, an hour before its interval would."""
    home = tmp_path / "home"
    env = dict(
        os.environ,
        CRONCHAIN_HOME=str(home),
        CRONCHAIN_APPS="etl_tasks:app",
        CRONCHAIN_RECONCILE_INTERVAL="3600",
    )
    for name in ("CRONCHAIN_BROKER_URL", "CRONCHAIN_JOBS_DIR"):
        env.pop(name, None)
    log = tmp_path / "beat.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "cronchain.tasks", "beat", "--loglevel", "INFO"],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # Beat's own line for each send is off in cronchain's processes (workers.logs):
        # the message itself is what it sent.
        def queued() -> bool:
            folder = home / "broker" / "queue"
            messages = list(folder.iterdir()) if folder.exists() else []
            return any("cronchain.reconcile" in m.read_text() for m in messages)

        wait_until(queued, 30, "the reconcile message in the broker's folder")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_an_app_whose_module_fails_is_one_line_naming_the_error(cli: Cli, tmp_path: Path):
    (tmp_path / "broken.py").write_text("from celery import Celery\napp = Celery('b')\n1/0\n")
    done = cli("apply", "--app", "broken:app", code=2)
    assert done.stderr == (
        "cronchain: app: cannot load the Celery app 'broken:app': ZeroDivisionError:"
        " division by zero\n"
    )
