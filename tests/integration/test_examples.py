"""Every job file a reader is shown applies as shown: the files under ``examples/`` and
each whole job file (``project:`` and ``jobs:``) written out in the README or a page of
the site, each applied by ``cronchain apply`` on an embedded database of its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.repo import ROOT, manual


def _job_file(text: str) -> bool:
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(found, dict) and {"project", "jobs"} <= set(found)


EXAMPLES = sorted(
    path
    for path in (ROOT / "examples").rglob("*.yaml")
    if "kubernetes" not in path.parts and _job_file(path.read_text())
)
BLOCKS = [b for b in re.findall(r"```yaml\n(.*?)```", manual(), re.S) if _job_file(b)]


def apply(path: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
    env["CRONCHAIN_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "cronchain.scheduler.cli", "apply", str(path)],
        env=env | {"CRONCHAIN_DATABASE_URL": f"sqlite:///{home}/cronchain.db"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded database migrated once by ``cronchain db upgrade``; each test applies
    into a copy of it (a command's interpreter costs a second or two of CPU)."""
    home = tmp_path_factory.mktemp("schema")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
    done = subprocess.run(
        [sys.executable, "-m", "cronchain.scheduler.cli", "db", "upgrade"],
        env=env | {"CRONCHAIN_DATABASE_URL": f"sqlite:///{home}/cronchain.db"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not (home / "cronchain.db-wal").exists()  # the file holds every page
    return home / "cronchain.db"


@pytest.fixture
def home(schema: Path, tmp_path: Path) -> Path:
    """A home of the test's own, its database a copy of the migrated one."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copyfile(schema, home / "cronchain.db")
    return home


def test_the_examples_and_the_manual_show_job_files():
    names = {path.relative_to(ROOT / "examples").as_posix() for path in EXAMPLES}
    assert {
        "demo.yaml",
        "workflows.yaml",
        "alerts.yaml",
        "tutorials/workflow.yaml",
        "celery_project/jobs.yaml",
    } <= names
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_example_file_applies(path: Path, home: Path):
    done = apply(path, home)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: yaml.safe_load(b)["project"])
def test_each_job_file_of_the_manual_applies(block: str, home: Path, tmp_path: Path):
    path = tmp_path / "jobs.yaml"
    path.write_text(block)
    done = apply(path, home)
    assert done.returncode == 0, f"{done.stderr}\n{block}"
