"""cronchain in an ordinary Celery project (issue 35): what pip installs claims only the
``cronchain`` package, so a project's own ``tasks.py`` and ``celeryconfig.py`` (Celery's
tutorial names them so) and python-statemachine (import name ``statemachine``) stay
theirs, and cronchain's app never reads the project's ``celeryconfig``."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select

from cronchain.scheduler.storage.models import invocations
from tests.e2e.harness import Cluster, database
from tests.support.repo import ROOT
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

# The project's modules say when they are imported: cronchain must import neither.
USER_TASKS = """
from pathlib import Path

Path(__file__).with_name("tasks-was-imported").write_text("yes")

from celery import Celery

app = Celery("shop")
app.config_from_object("celeryconfig")


@app.task
def add(x, y):
    return x + y
"""
USER_CONFIG = """
from pathlib import Path

Path(__file__).with_name("celeryconfig-was-imported").write_text("yes")
broker_url = "redis://127.0.0.1:1/0"  # nothing listens there: cronchain must not use it
"""
JOBS = """
project: shop
jobs:
  - {name: ping, schedule: every 1s, noop: {}}
  - {name: pong, schedule: every 1s, noop: {}}
"""
TOPS = ("scheduler", "statemachine", "tasks", "migrations")


def test_cronchain_up_in_a_celery_project_reads_none_of_its_modules(tmp_path: Path):
    project = tmp_path / "shop"
    project.mkdir()
    (project / "tasks.py").write_text(USER_TASKS)
    (project / "celeryconfig.py").write_text(USER_CONFIG)
    (project / "jobs.yaml").write_text(JOBS)
    cluster = Cluster.create(project)  # the processes start in the project's folder
    try:
        cluster.start("up", sys.executable, "-m", "cronchain.scheduler.cli", "up", "jobs.yaml")
        db = database(f"sqlite:///{project}/home/cronchain.db")

        def succeeded() -> int | None:
            if not (project / "home" / "cronchain.db").exists():
                return None
            query = select(func.count()).where(invocations.c.status == "SUCCEEDED")
            with db.connect() as conn:
                if not inspect(conn).has_table("invocations"):  # the file is made first
                    return None
                done = conn.execute(query).scalar_one()
            return done if done >= 6 else None

        wait_until(succeeded, 60, "runs of both jobs to succeed")
    finally:
        cluster.kill("up", signal.SIGTERM)
    assert not (project / "celeryconfig-was-imported").exists(), cluster.log("up")[-3000:]
    assert not (project / "tasks-was-imported").exists()


def test_python_statemachine_is_installed_beside_cronchain(tmp_path: Path):
    """From the project's folder: ``statemachine`` is python-statemachine's, and none of
    the repository's generic names is imported by cronchain's app or CLI."""
    script = (
        "import json, sys\n"
        "import cronchain.tasks, cronchain.scheduler.cli.main, cronchain.migrations\n"
        "import statemachine\n"
        "from statemachine import StateMachine\n"
        f"tops = {{m: getattr(sys.modules[m], '__file__', None) for m in sys.modules\n"
        f"        if m.split('.')[0] in {TOPS!r} + ('celeryconfig',)}}\n"
        "print(json.dumps({'statemachine': statemachine.__file__, 'tops': tops}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout)
    assert {m.split(".")[0] for m in found["tops"]} == {"statemachine"}  # imported above
    ours = [str(ROOT / top) for top in TOPS]  # the repository's folders, by these names
    assert "site-packages" in found["statemachine"]
    assert not [f for f in found["tops"].values() if f and f.startswith(tuple(ours))]


def test_the_wheel_installs_everything_beneath_cronchain(tmp_path: Path):
    """The built wheel holds one top-level package, ``cronchain``, with every module of
    the repository's folders and celeryconfig.py and every file the page serves, and the
    console script points in it."""
    source = tmp_path / "source"  # setuptools builds in the tree: a copy, not the checkout
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("cronchain-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "cronchain",
        wheel.name.split("-py3")[0] + ".dist-info",
    }
    ours = [f for f in tracked_files() if f.split("/")[0] in (*TOPS, "celeryconfig.py")]
    modules = {f"cronchain/{f}" for f in ours if f.endswith(".py")}
    assert modules <= set(names), sorted(modules - set(names))
    served = ("scheduler/web/templates/", "scheduler/web/static/")
    page = {f"cronchain/{f}" for f in ours if f.startswith(served)}
    assert "cronchain/scheduler/web/static/cronchain.js" in page
    assert page <= set(names), sorted(page - set(names))  # the page's templates, style, script
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert re.search(r"^cronchain = cronchain\.scheduler\.cli\.main:main$", text, re.M)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr


def tracked_files() -> list[str]:
    """The repository's files, as a fresh clone has them (and any not committed yet)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [f for f in listed.stdout.splitlines() if (ROOT / f).is_file()]


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        "cronchain." + ".".join(path.parent.relative_to(ROOT).parts)
        for top in TOPS
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert folders | {"cronchain"} == listed
