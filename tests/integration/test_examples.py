"""Every job file a reader is shown applies as shown: the files under ``examples/`` and
each whole job file (``project:`` and ``jobs:``) written out in the README or a page of
the site, each applied by ``cronchain apply`` on an embedded database of its own."""

from __future__ import annotations

import os
import re
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


def migrated(home: Path) -> Path:
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
    done = subprocess.run(
        [sys.executable, "-m", "cronchain.scheduler.cli", "db", "upgrade"],
        env=env | {"CRONCHAIN_DATABASE_URL": f"sqlite:///{home}/cronchain.db"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
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
def test_each_example_file_applies(path: Path, tmp_path: Path):
    done = apply(path, migrated(tmp_path / "home"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: yaml.safe_load(b)["project"])
def test_each_job_file_of_the_manual_applies(block: str, tmp_path: Path):
    path = tmp_path / "jobs.yaml"
    path.write_text(block)
    done = apply(path, migrated(tmp_path / "home"))
    assert done.returncode == 0, f"{done.stderr}\n{block}"
