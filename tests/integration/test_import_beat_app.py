"""``cronchain import-beat APP`` on an app with one entry of each kind beat takes (issue
19): what cronchain runs as beat does is written, as beat would send it (the task's own
queue and priority, the app's routes); everything else is named on stderr with its reason,
and then nothing is written unless ``--skip-unsupported``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cronchain.scheduler.cli.main import main

APP = """
from datetime import datetime, timedelta, timezone

from celery import Celery
from celery.schedules import crontab, schedule, solar

app = Celery("shop", broker="memory://")
app.conf.timezone = "Europe/Berlin"
app.conf.task_routes = {
    "shop.routed": {"queue": "etl"},
    "shop.fanout": {"exchange": "fan", "routing_key": "rk"},
}


class Fortnightly(schedule):
    pass


class Sunset(solar):  # solar itself needs the ephem library, which is not installed here
    def __init__(self):
        self.event = "sunset"


@app.task(name="shop.own", queue="ownq", priority=7)
def own():
    pass


app.conf.beat_schedule = {
    "own options": {"task": "shop.own", "schedule": 60},
    "routed": {"task": "shop.routed", "schedule": crontab(minute="*/15", day_of_week="mon-fri")},
    "given options": {
        "task": "shop.plain",
        "schedule": crontab(minute=0, hour="0,12"),
        "args": (1, "a"),
        "kwargs": {"full": True},
        "options": {"queue": "q1", "priority": 3, "expires": 120},
    },
    "a b": {"task": "shop.plain", "schedule": 30},
    "a-b": {"task": "shop.plain", "schedule": 45},
    "sunset": {"task": "shop.plain", "schedule": Sunset()},
    "custom": {"task": "shop.plain", "schedule": Fortnightly(timedelta(days=14))},
    "relative": {"task": "shop.plain", "schedule": 10.0, "relative": True},
    "nowfun": {"task": "shop.plain", "schedule": crontab(minute=0, nowfun=datetime.now)},
    "too fast": {"task": "shop.plain", "schedule": 0.5},
    "routing key": {"task": "shop.plain", "schedule": 60, "options": {"routing_key": "x"}},
    "fanout route": {"task": "shop.fanout", "schedule": 60},
    "expires date": {
        "task": "shop.plain",
        "schedule": 60,
        "options": {"expires": datetime(2030, 1, 1, tzinfo=timezone.utc)},
    },
    "expires timedelta": {
        "task": "shop.plain", "schedule": 60, "options": {"expires": timedelta(minutes=5)}
    },
    "dates as args": {"task": "shop.plain", "schedule": 60, "args": (datetime(2030, 1, 1),)},
    "both day fields": {
        "task": "shop.plain", "schedule": crontab(minute=0, hour=0, day_of_month=1, day_of_week=1)
    },
    "no task": {"schedule": 60},
}
"""

LEFT_OUT = {
    "sunset": "solar schedule (sunset) has no cron equivalent",
    "custom": "custom schedule class Fortnightly",
    "relative": "relative=True rounds the start to the period",
    "nowfun": "nowfun replaces the clock",
    "too fast": "interval 0.5s: cronchain's periods are whole milliseconds from 1s to 1000d",
    "routing key": "option routing_key has no cronchain equivalent",
    "fanout route": "exchange 'fan' and routing key 'rk'",
    "expires date": "expires is a fixed time",
    "expires timedelta": "expires is a timedelta, which Celery's send_task fails on",
    "dates as args": "args hold values that are not JSON",
    "no task": "names no task",
}


@pytest.fixture
def app_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "shopapp.py").write_text(APP)
    monkeypatch.chdir(tmp_path)  # as celery -A: the current directory is importable
    return tmp_path


def left_out_lines(err: str) -> dict[str, str]:
    lines = [line for line in err.splitlines() if line.startswith("cronchain: left out")]
    return {line.split("'")[1]: line for line in lines}


def test_what_beat_runs_differently_is_named_and_nothing_is_written(
    app_folder: Path, capsys: pytest.CaptureFixture[str]
):
    assert main(["import-beat", "shopapp:app", "-o", "beat.yaml"]) == 2
    err = capsys.readouterr().err
    lines = left_out_lines(err)
    assert set(lines) == set(LEFT_OUT)
    for name, why in LEFT_OUT.items():
        assert why in lines[name], (name, lines[name])
    assert "11 entries have no faithful equivalent; nothing written" in err
    assert not (app_folder / "beat.yaml").exists()


def test_the_others_are_written_as_beat_would_send_them(
    app_folder: Path, capsys: pytest.CaptureFixture[str]
):
    argv = ["import-beat", "shopapp:app", "-o", "beat.yaml", "--skip-unsupported"]
    assert main(argv) == 0
    assert capsys.readouterr().out == "wrote 6 jobs of project shop-beat to beat.yaml\n"
    data = yaml.safe_load((app_folder / "beat.yaml").read_text())
    assert data["project"] == "shop-beat"
    jobs = {job.pop("name"): job for job in data["jobs"]}
    assert jobs == {
        "own-options": {  # the task's own queue and priority, as apply_async sends it
            "schedule": "every 1m",
            "celery": {"task": "shop.own", "queue": "ownq", "priority": 7},
        },
        "routed": {  # the app's task_routes; a field keeps its spelling
            "schedule": "*/15 * * * mon-fri",
            "timezone": "Europe/Berlin",
            "celery": {"task": "shop.routed", "queue": "etl"},
        },
        "given-options": {
            "schedule": "0 0,12 * * *",
            "timezone": "Europe/Berlin",
            "schedule_to_start": 120,
            "celery": {
                "task": "shop.plain",
                "queue": "q1",
                "args": [1, "a"],
                "kwargs": {"full": True},
                "priority": 3,
                "expires": 120,
            },
        },
        "a-b": {"schedule": "every 30s", "celery": {"task": "shop.plain", "queue": "celery"}},
        "a-b-2": {"schedule": "every 45s", "celery": {"task": "shop.plain", "queue": "celery"}},
        "both-day-fields": {  # Celery's rule: the 1st of the month, when it is a Monday
            "schedule": "0 0 1 * 1",
            "timezone": "Europe/Berlin",
            "days": "both",
            "celery": {"task": "shop.plain", "queue": "celery"},
        },
    }
    assert main(["apply", "beat.yaml", "--dry-run"]) in (0, 1)  # the file is one apply takes


def test_a_bad_project_and_an_app_without_entries_write_nothing(
    app_folder: Path, capsys: pytest.CaptureFixture[str]
):
    assert main(["import-beat", "shopapp:app", "--project", "bad name"]) == 2
    assert "--project: 'bad name' must be" in capsys.readouterr().err
    (app_folder / "empty.py").write_text("from celery import Celery\napp = Celery('e')\n")
    assert main(["import-beat", "empty:app", "-o", "e.yaml"]) == 2
    assert "no entry of empty:app to write; nothing written" in capsys.readouterr().err
    assert not (app_folder / "e.yaml").exists()
