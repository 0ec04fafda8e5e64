"""The quickstart (docs/quickstart.md), followed as a newcomer follows it: in a copy of
``examples/celery_project``, the page's own commands, on the embedded database and on
PostgreSQL, over a Redis of the test's own. The page's file and code blocks are checked
to be the example's, so that what the page shows is what this test runs."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import Cluster
from tests.support.repo import ROOT
from tests.support.services import free_port, redis_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

PAGE = ROOT / "docs" / "quickstart.md"
EXAMPLE = ROOT / "examples" / "celery_project"
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.M | re.S)


def commands() -> list[str]:
    """Every command the page's ``sh`` blocks run, without their comments."""
    return [
        line.split("#")[0].strip()
        for block in blocks("sh")
        for line in block.splitlines()
        if line.strip() and not line.startswith("export ")
    ]


def test_the_page_shows_the_example_project():
    [job_file] = blocks("yaml")
    assert yaml.safe_load(job_file) == yaml.safe_load((EXAMPLE / "jobs.yaml").read_text())
    [install] = blocks("python")
    app_module = (EXAMPLE / "proj" / "celery.py").read_text()
    for line in filter(None, install.splitlines()):
        assert line in app_module
    assert {
        "cronchain up jobs.yaml",
        "celery -A proj worker -E --loglevel INFO",
        "cronchain history",
        "cronchain serve",
        "celery -A proj flower --basic-auth=admin:change-me",
    } <= set(commands())


class Terminals(Cluster):
    """The reader's terminals: the harness's processes, started in the project's folder
    from the commands the page writes, with the environment the reader exported (none of
    the harness's own settings: the database is where the page says)."""

    def open(self, name: str, command: str, *extra: str) -> None:
        program, *args = command.split()
        self.start(name, str(BIN / program), *args, *extra)

    def run(self, command: str, *extra: str) -> str:
        program, *args = command.split()
        done = subprocess.run(
            [str(BIN / program), *args, *extra],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> None:
        """SIGTERM to every process group, then SIGKILL to what is left after 30 s."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(params=["embedded", pytest.param("postgresql", marks=pytest.mark.postgres)])
def terminals(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Terminals]:
    folder = tmp_path / "project"
    # As the repository has it: no database or log a reader's own try left in the folder.
    left = shutil.ignore_patterns(".cronchain", "*.log", "__pycache__")
    shutil.copytree(EXAMPLE, folder, ignore=left)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRONCHAIN_", "CELERY_"))}
    if request.param == "postgresql":
        env["CRONCHAIN_DATABASE_URL"] = request.getfixturevalue("pg_url")
    with redis_server(tmp_path) as redis:
        # The project's broker, which the page exports for cronchain as well.
        env |= {"CRONCHAIN_BROKER_URL": redis.url, "CELERY_BROKER_URL": redis.url}
        shell = Terminals(folder, env)
        try:
            yield shell
        finally:
            shell.stop()


def get(url: str, auth: bytes | None = None) -> Any:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
    except OSError:
        return None
    return json.loads(body) if "/api/" in url else body


def test_the_quickstart_runs_a_project_task_on_schedule(terminals: Terminals):
    terminals.open("up", "cronchain up jobs.yaml")
    terminals.open("worker", "celery -A proj worker -E --loglevel INFO")
    flower = free_port()
    terminals.open(
        "flower",
        "celery -A proj flower --basic-auth=admin:change-me",
        "--address=127.0.0.1",
        f"--port={flower}",
    )

    def succeeded() -> list[dict[str, Any]] | None:
        try:
            runs = json.loads(terminals.run("cronchain history --json"))
        except AssertionError as err:  # only while up makes the database
            assert "not migrated" in str(err) or "unreachable" in str(err), err
            return None
        done = [r for r in runs if r["job"] == "proj/report" and r["status"] == "SUCCEEDED"]
        return done if len(done) >= 2 else None

    def reported() -> bool:  # a log read, where each `cronchain history` is an interpreter
        return len(re.findall(r"proj/report \S+ attempt 1 SUCCEEDED", terminals.log("worker"))) >= 2

    wait_until(reported, 90, "the project's worker to report two runs of proj/report")
    wait_until(succeeded, 30, "two runs of proj/report to succeed", every=1.0)
    table = terminals.run("cronchain history")
    assert re.search(r"proj/report\s+\S+\s+SUCCEEDED", table), table
    # The task ran in the project's worker, which logged the run's outcome, and
    # nothing of the job machine's own chatter.
    worker = terminals.log("worker")
    assert "'daily report sent'" in worker
    assert re.search(r"proj/report \S+ attempt 1 SUCCEEDED", worker), worker[-2000:]
    assert "callback" not in worker, worker[-2000:]

    web = free_port()
    terminals.open("serve", "cronchain serve", f"--port={web}")
    page = wait_until(lambda: get(f"http://127.0.0.1:{web}/"), 30, "the web page")
    assert "proj/report" in page

    def in_flower() -> list[dict[str, Any]] | None:
        tasks = get(f"http://127.0.0.1:{flower}/api/tasks", b"admin:change-me") or {}
        runs = [t for t in tasks.values() if t.get("name") == "proj/report"]
        return runs if any(t.get("state") == "SUCCESS" for t in runs) else None

    runs = wait_until(in_flower, 60, "Flower to show the runs under their job")
    assert all(t["uuid"].startswith("cronchain-") for t in runs)
