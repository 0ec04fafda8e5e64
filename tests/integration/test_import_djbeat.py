"""``import-beat --django-celery-beat`` (issue 19) on real django-celery-beat databases,
made by its own migrations and filled through its own models in subprocesses: this
process never sets Django up, as the importer must not need it. The job file written is
applied to a cronchain database; what has no faithful equivalent is named on stderr, what
beat itself will never send again is named as ignored, and what is imported is checked
against what django-celery-beat's own scheduler reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import yaml
from celery.schedules import crontab

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.cli.main import main
from cronchain.scheduler.declare.beatimport import djangobeat
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import SpecError, TransientError
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.storage.db import make_engine
from tests.support import services
from tests.support.beat import (
    JAN,
    beat_fires,
    both_restricted,
    cronchain_fires,
    day_field_combinations,
)
from tests.support.engine import Clock, RecordingPort

pytestmark = pytest.mark.postgres

PROJECT = "p"
PAUSED = "disabled in django-celery-beat"
CRON = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
DAYS = day_field_combinations()
REPO = Path(__file__).resolve().parents[2]

SETTINGS = """\
SECRET_KEY = "test"
INSTALLED_APPS = ["django_celery_beat"]
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {databases!r}
"""

# Filled through django-celery-beat's models, as its admin would: save() checks each row.
ROWS = """\
from datetime import datetime, timezone

import django

django.setup()
from django_celery_beat.models import (
    ClockedSchedule, CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule,
)

UTC = timezone.utc


def cron(**fields):
    return CrontabSchedule.objects.create(**fields)


def every(count, period):
    return IntervalSchedule.objects.create(every=count, period=period)


def add(name, task, **fields):
    PeriodicTask.objects.create(name=name, task=task, **fields)


add("weekday mornings", "reports.daily", kwargs='{"full": true}',
    crontab=cron(minute="30", hour="7", day_of_week="mon-fri", timezone="Europe/Berlin"))
add("quarter-hourly", "metrics.flush", crontab=cron(minute="*/15"))
add("office hours", "mail.poll", args='[1, "two"]',
    crontab=cron(minute="0", hour="8-18/2", day_of_week="1-5", timezone="America/New_York"))
add("quarterly", "billing.close",
    crontab=cron(minute="0", hour="3", day_of_month="1", month_of_year="*/3"))
add("heartbeat", "health.ping", interval=every(30, "seconds"))
add("sync", "crm.sync", interval=every(5, "minutes"))
add("export", "reports.export", interval=every(2, "hours"),
    queue="reports", priority=5, expire_seconds=600)
add("started long ago", "etl.load", interval=every(10, "minutes"),
    start_time=datetime(2020, 1, 1, tzinfo=UTC))
add("nightly cleanup", "db.vacuum", crontab=cron(minute="0", hour="2"), enabled=False)
add("friday the 13th", "luck.check",
    crontab=cron(minute="0", hour="0", day_of_month="13", day_of_week="fri"))
# None of these has a faithful cronchain equivalent.
add("tight loop", "spin", interval=every(1500, "microseconds"))
add("launch", "rocket.go", one_off=True,
    clocked=ClockedSchedule.objects.create(clocked_time=datetime(2030, 1, 1, 9, tzinfo=UTC)))
add("at sunrise", "blinds.open",
    solar=SolarSchedule.objects.create(event="sunrise", latitude=52.52, longitude=13.405))
add("once", "setup.run", interval=every(1, "hours"), one_off=True)
add("later", "future.run", interval=every(1, "hours"), start_time=datetime(2100, 1, 1, tzinfo=UTC))
add("until summer", "promo.mail", interval=every(1, "hours"),
    expires=datetime(2030, 6, 1, tzinfo=UTC))
add("audited", "audit.log", interval=every(1, "hours"), exchange="audit")
# Beat will never send these again: no job, and no reason to refuse the import.
add("welcome mail", "mail.welcome", interval=every(1, "hours"), one_off=True, enabled=False,
    total_run_count=1)
# save() clears last_run_at of a disabled row; the column is set as a run would leave it.
PeriodicTask.objects.filter(name="welcome mail").update(
    last_run_at=datetime(2024, 3, 1, 12, tzinfo=UTC))
add("go live", "release.flip", one_off=True, enabled=False,
    clocked=ClockedSchedule.objects.create(clocked_time=datetime(2024, 5, 1, 9, tzinfo=UTC)))
add("spring promo", "promo.mail", crontab=cron(minute="0", hour="9"),
    expires=datetime(2024, 4, 1, tzinfo=UTC))
add("retired digest", "mail.digest", interval=every(1, "days"), enabled=False,
    expires=datetime(2023, 1, 1, tzinfo=UTC))
add("seed data", "db.seed", interval=every(1, "hours"), one_off=True, total_run_count=1,
    last_run_at=datetime(2024, 2, 1, tzinfo=UTC))
"""
# Every combination of full and partial day fields: "days N" is DAYS[N] (issue 34).
DAYS_ROWS = """\
import django

django.setup()
from django_celery_beat.models import CrontabSchedule, PeriodicTask

for number, (dom, dow) in enumerate(DAYS):
    cron = CrontabSchedule.objects.create(
        minute="0", hour="0", day_of_month=dom, day_of_week=dow)
    PeriodicTask.objects.create(name=f"days {number}", task="calendar.check", crontab=cron)
"""

# What django-celery-beat's own scheduler makes of each row (its ModelEntry), as JSON, for
# the differential test. Solar rows are skipped: their schedule needs ephem.
BEAT_VIEW = """\
import json
import os
import sys

import django

django.setup()
from celery import Celery
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry

CRON = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
app = Celery(set_as_current=False)
view = {}
for model in PeriodicTask.objects.filter(solar=None):
    entry = ModelEntry(model, app=app)
    schedule = entry.schedule
    if hasattr(schedule, "run_every"):
        schedule = schedule.run_every.total_seconds()
    elif hasattr(schedule, "day_of_week"):
        schedule = {f: sorted(getattr(schedule, f)) for f in CRON} | {"zone": str(schedule.tz)}
    else:
        schedule = repr(schedule)
    options = dict(entry.options)
    options["headers"].pop("periodic_task_name")
    view[entry.name] = {
        "task": entry.task, "args": entry.args, "kwargs": entry.kwargs,
        "options": {k: v for k, v in options.items() if v != {}},
        "schedule": schedule, "enabled": model.enabled,
    }
json.dump(view, sys.stdout, default=str)
"""


def celery(task: str, **options: Any) -> dict[str, Any]:
    return {"task": task, "queue": "celery", **options}


EXPECTED = {
    "weekday-mornings": {
        "schedule": "30 7 * * mon-fri",
        "timezone": "Europe/Berlin",
        "celery": celery("reports.daily", kwargs={"full": True}),
    },
    "quarter-hourly": {"schedule": "*/15 * * * *", "celery": celery("metrics.flush")},
    "office-hours": {
        "schedule": "0 8-18/2 * * 1-5",
        "timezone": "America/New_York",
        "celery": celery("mail.poll", args=[1, "two"]),
    },
    "quarterly": {"schedule": "0 3 1 */3 *", "celery": celery("billing.close")},
    "heartbeat": {"schedule": "every 30s", "celery": celery("health.ping")},
    "sync": {"schedule": "every 5m", "celery": celery("crm.sync")},
    "export": {
        "schedule": "every 2h",
        "schedule_to_start": 600,
        "celery": celery("reports.export", queue="reports", priority=5, expires=600),
    },
    "started-long-ago": {"schedule": "every 10m", "celery": celery("etl.load")},
    "nightly-cleanup": {"schedule": "0 2 * * *", "celery": celery("db.vacuum"), "paused": PAUSED},
    "friday-the-13th": {"schedule": "0 0 13 * fri", "days": "both", "celery": celery("luck.check")},
}

LEFT_OUT = {
    "tight loop": "interval 0.0015s",
    "launch": "clocked schedule: one run at 2030-01-01T09:00:00+00:00",
    "at sunrise": "solar schedule (sunrise at 52.52, 13.405)",
    "once": "one_off",
    "later": "start_time 2100-01-01T00:00:00+00:00",
    "until summer": "expires 2030-06-01T00:00:00+00:00",
    "audited": "option exchange has no cronchain equivalent",
}

IGNORED = {
    "welcome mail": "one_off, disabled: beat disables a one-off task after its run",
    "go live": "clocked at 2024-05-01T09:00:00+00:00, disabled: its one run time has passed",
    "spring promo": "expired 2024-04-01T00:00:00+00:00: beat never sends it again",
    "retired digest": "expired 2023-01-01T00:00:00+00:00: beat never sends it again",
    "seed data": "one_off, run 1 time(s): beat disables it at its next check, unrun",
}
# What the rows alone rule out; the converter names the other two of LEFT_OUT.
READ_LEFT_OUT = {"launch", "at sunrise", "once", "later", "until summer"}


def import_beat(
    url: str, out: Path, capsys: pytest.CaptureFixture[str], *flags: str, status: int = 0
) -> str:
    """What ``cronchain import-beat --django-celery-beat URL FLAGS`` writes to stderr; the
    job file goes to ``out``."""
    argv = ["import-beat", "--django-celery-beat", url, "--project", PROJECT, "-o", str(out)]
    assert main([*argv, *flags]) == status
    return capsys.readouterr().err


def named(stderr: str, what: str, reasons: dict[str, str]) -> None:
    """Each entry of ``reasons`` is on a ``cronchain: WHAT beat entry 'NAME': WHY`` line."""
    lines = stderr.splitlines()
    for name, why in reasons.items():
        start = f"cronchain: {what} beat entry {name!r}: "
        assert [line for line in lines if line.startswith(start) and why in line], (name, stderr)


@dataclass(frozen=True)
class DjBeatDatabase:
    url: str
    beat_view: dict[str, Any]  # what django-celery-beat's scheduler reads from each row


def build_djbeat_database(
    folder: Path, database: dict[str, Any], rows: str = ROWS
) -> dict[str, Any]:
    """Migrate and fill a django-celery-beat database with Django, out of this process;
    return what its scheduler reads from the rows (:data:`BEAT_VIEW`)."""
    (folder / "djbeat_settings.py").write_text(SETTINGS.format(databases={"default": database}))
    (folder / "djbeat_rows.py").write_text(f"DAYS = {DAYS!r}\n" + rows)
    (folder / "djbeat_view.py").write_text(BEAT_VIEW)
    env = {**os.environ, "PYTHONPATH": str(folder), "DJANGO_SETTINGS_MODULE": "djbeat_settings"}
    for script in (
        ["-m", "django", "migrate", "--no-input"],
        ["djbeat_rows.py"],
        ["djbeat_view.py"],
    ):
        done = subprocess.run(
            [sys.executable, *script], cwd=folder, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def djbeat(
    pg_admin: sqlalchemy.Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DjBeatDatabase]:
    """A django-celery-beat database on PostgreSQL."""
    name = services.create_database(pg_admin)
    url = sqlalchemy.engine.make_url(services.database_url(name))
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "HOST": url.host,
        "PORT": url.port or 5432,
        "USER": url.username,
        "PASSWORD": url.password or "",
    }
    beat_view = build_djbeat_database(tmp_path_factory.mktemp("djbeat_pg"), database)
    yield DjBeatDatabase(url.set(drivername="postgresql").render_as_string(False), beat_view)
    services.drop_database(pg_admin, name)


@pytest.fixture(scope="module")
def djbeat_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same rows, made by the same migrations on SQLite (naive datetimes, decimals as
    text)."""
    folder = tmp_path_factory.mktemp("djbeat_sqlite")
    path = folder / "beat.sqlite3"
    build_djbeat_database(folder, {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)})
    return path


def test_a_djbeat_database_is_imported_and_applied(
    djbeat: DjBeatDatabase, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "jobs.yaml"
    stderr = import_beat(djbeat.url, out, capsys, "--skip-unsupported")

    written = yaml.safe_load(out.read_text())
    assert written["project"] == PROJECT
    jobs = {job.pop("name"): job for job in written["jobs"]}
    assert jobs == EXPECTED
    named(stderr, "left out", LEFT_OUT)
    named(stderr, "ignored", IGNORED)
    lines = stderr.splitlines()
    assert not [line for line in lines if any(name in line for name in EXPECTED)], stderr

    db = make_engine(pg_url)
    engine = Engine(
        db, RecordingPort(), default_invokers(), grace=timedelta(seconds=15), clock=Clock()
    )
    try:
        sched = Scheduler(engine)
        assert sorted(sched.apply(out).created) == sorted(f"{PROJECT}/{n}" for n in EXPECTED)
        paused = {j["id"]: (j["paused"], j["pause_reason"]) for j in sched.jobs()}
    finally:
        db.dispose()
    assert paused.pop(f"{PROJECT}/nightly-cleanup") == (True, PAUSED)
    assert set(paused.values()) == {(False, None)}


def test_day_fields_mean_what_celery_means(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Each row of full and partial day fields fires on the days Celery's crontab of its
    fields does (issue 34), with ``days: both`` when both are restricted (issue 35)."""
    path = tmp_path / "days.sqlite3"
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}
    build_djbeat_database(tmp_path, database, DAYS_ROWS)
    out = tmp_path / "jobs.yaml"
    import_beat(f"sqlite:///{path}", out, capsys)
    jobs = {job["name"]: job for job in yaml.safe_load(out.read_text())["jobs"]}
    for number, (dom, dow) in enumerate(DAYS):
        cron = crontab(minute=0, hour=0, day_of_month=dom, day_of_week=dow)
        job = jobs[f"days-{number}"]
        assert job.get("days") == ("both" if both_restricted(cron) else None), (dom, dow)
        fires = cronchain_fires(job["schedule"], "UTC", JAN, job.get("days"))
        assert fires == beat_fires(cron, "UTC", JAN), (dom, dow)


def test_entries_are_what_django_celery_beats_scheduler_reads(djbeat: DjBeatDatabase):
    """Each entry read with SQL against django-celery-beat's own ModelEntry of the row:
    the task, arguments, options, the crontab's fields as Celery expands them and its
    zone, the interval, and enabled."""
    entries, _, _ = djangobeat.read_entries(djbeat.url)
    assert entries
    for entry in entries:
        theirs = djbeat.beat_view[entry.name]
        schedule = entry.schedule
        if isinstance(schedule, timedelta):
            ours: Any = schedule.total_seconds()
        else:
            ours = {f: sorted(getattr(schedule, f)) for f in CRON} | {"zone": entry.zone}
        assert {
            "task": entry.task,
            "args": entry.args,
            "kwargs": entry.kwargs,
            "options": dict(entry.options),
            "schedule": ours,
            "enabled": entry.paused is None,
        } == theirs, entry.name


def test_rows_beat_never_sends_again_are_ignored(djbeat: DjBeatDatabase):
    """An expires date past (enabled or not), a one-off task that has run, a disabled
    one-off or clocked task: ignored, with the reason, and neither entries nor left out.
    A disabled crontab row without an expires date is still an entry (paused)."""
    entries, left_out, ignored = djangobeat.read_entries(djbeat.url)
    assert dict(ignored) == IGNORED
    assert {name for name, _ in left_out} == READ_LEFT_OUT
    assert not {entry.name for entry in entries} & set(IGNORED)
    assert [e.paused for e in entries if e.name == "nightly cleanup"] == [PAUSED]


def test_expires_is_left_out_until_it_has_come(djbeat: DjBeatDatabase):
    """``now`` decides: an expires date to come is left out (beat still runs the task
    until then), one that has come is ignored; a disabled clocked task whose time is to
    come was turned off before its run."""
    after, before = datetime(2031, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)
    _, left_out, ignored = djangobeat.read_entries(djbeat.url, now=after)
    assert {name for name, _ in left_out} == READ_LEFT_OUT - {"until summer"}
    assert dict(ignored) == IGNORED | {
        "until summer": "expired 2030-06-01T00:00:00+00:00: beat never sends it again"
    }
    _, left_out, ignored = djangobeat.read_entries(djbeat.url, now=before)
    assert dict(left_out)["spring promo"].startswith("expires 2024-04-01T00:00:00+00:00")
    assert dict(ignored) == {
        name: why for name, why in IGNORED.items() if name != "spring promo"
    } | {"go live": "clocked at 2024-05-01T09:00:00+00:00, disabled: turned off before its run"}


def test_sqlite_reads_as_postgresql(djbeat: DjBeatDatabase, djbeat_sqlite: Path):
    """The same rows on SQLite: the same entries, the same reasons, the same ignored."""
    from_sqlite = djangobeat.read_entries(f"sqlite:///{djbeat_sqlite}")
    assert from_sqlite == djangobeat.read_entries(djbeat.url)
    entries, left_out, ignored = from_sqlite
    assert {name for name, _ in left_out} == READ_LEFT_OUT
    assert dict(ignored) == IGNORED
    assert len(entries) == len(EXPECTED) + len(LEFT_OUT) - len(READ_LEFT_OUT)


def test_ignored_rows_alone_do_not_refuse_the_import(
    djbeat_sqlite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Without --skip-unsupported: a database of supported and ignored rows is written
    (exit 0), each ignored row named as such and none as left out."""
    path = tmp_path / "beat.sqlite3"
    shutil.copyfile(djbeat_sqlite, path)
    db = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        with db.begin() as conn:
            tasks = sqlalchemy.Table(
                "django_celery_beat_periodictask", sqlalchemy.MetaData(), autoload_with=conn
            )
            conn.execute(tasks.delete().where(tasks.c.name.in_(LEFT_OUT)))
    finally:
        db.dispose()
    out = tmp_path / "jobs.yaml"
    stderr = import_beat(f"sqlite:///{path}", out, capsys)

    jobs = {job.pop("name"): job for job in yaml.safe_load(out.read_text())["jobs"]}
    assert jobs == EXPECTED
    named(stderr, "ignored", IGNORED)
    assert "left out" not in stderr, stderr


def test_the_importer_needs_no_django(djbeat: DjBeatDatabase):
    """Read where Django cannot be imported. (Where it can, kombu imports one helper of
    it, ``django.utils.functional``, for any Celery import: no settings, no models.)"""
    script = (
        "import sys; sys.modules['django'] = sys.modules['django_celery_beat'] = None;"
        " from scheduler.declare.beatimport.djangobeat import read_entries;"
        " print(*map(len, read_entries(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, djbeat.url], cwd=REPO, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout.split()) == (0, ["12", "5", "5"]), done.stderr


def test_a_database_that_is_not_django_celery_beats_is_refused(pg_url: str, tmp_path: Path):
    with pytest.raises(SpecError, match="has no table django_celery_beat_periodictask") as err:
        djangobeat.read_entries(pg_url)
    assert err.value.field == "--django-celery-beat"
    missing = tmp_path / "nothing.sqlite3"
    with pytest.raises(SpecError, match="is not a SQLite database file"):
        djangobeat.read_entries(f"sqlite:///{missing}")
    assert not missing.exists()  # not created by trying
    with pytest.raises(SpecError, match="must be a database URL"):
        djangobeat.read_entries("beat.sqlite3")


def test_a_server_that_cannot_be_reached_is_transient():
    where = f"127.0.0.1:{services.free_port()}/beat"
    with pytest.raises(TransientError) as err:
        djangobeat.read_entries(f"postgresql://nobody:secret@{where}")
    unreachable = f"--django-celery-beat: database postgresql://nobody:***@{where} is unreachable"
    assert str(err.value).startswith(unreachable)
