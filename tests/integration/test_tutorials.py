"""The tutorials' example files do what their pages say, step by step: the import-beat
tutorial followed literally in a copy of its project (the refusal, the edit, the job file
the page shows, applied), and the workflow tutorial's gate answering as the page says."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.repo import DOCS, ROOT
from tests.support.services import serving

TUTORIALS = ROOT / "examples" / "tutorials"
IMPORT_BEAT = (DOCS / "tutorials" / "import-beat.md").read_text()


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def shown_after(commands: str) -> str:
    """The output the page shows right after the block of ``commands``."""
    found = re.search(rf"```sh\n{re.escape(commands)}```\s*```text\n(.*?)```", IMPORT_BEAT, re.S)
    assert found, commands
    return found.group(1)


def page_cli(cwd: Path) -> Cli:
    """Commands as the page runs them, in ``cwd``, on the embedded default there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRONCHAIN_", "CELERY_"))}
    env["CELERY_BROKER_URL"] = "memory://"  # the app is loaded, never connected
    return Cli(env, cwd, timeout=120)


def test_the_import_beat_tutorial_followed_as_written(tmp_path: Path):
    project = tmp_path / "beatproject"
    shutil.copytree(TUTORIALS / "beatproject", project)  # step 1
    app = (project / "celeryapp.py").read_text()
    shown = blocks(IMPORT_BEAT, "python")[0]
    assert all(line in app.splitlines() for line in shown.splitlines() if line), shown
    command = blocks(IMPORT_BEAT, "sh")[1].strip().removeprefix("cronchain ").split()
    texts = blocks(IMPORT_BEAT, "text")
    with page_cli(project) as cronchain:
        refused = cronchain(*command, code=2)  # step 2
        assert refused.stderr == texts[0]
        assert not (project / "shop.yaml").exists()

        edited = app.replace(', "relative": True}', "}")  # step 3
        assert edited != app
        (project / "celeryapp.py").write_text(edited)
        assert cronchain(*command).stdout == texts[1]

        assert (project / "shop.yaml").read_text() == blocks(IMPORT_BEAT, "yaml")[0]  # step 4

        nights = blocks(IMPORT_BEAT, "sh")[3]  # step 6: the nights across a change of clocks
        assert cronchain(*shlex.split(nights.removeprefix("cronchain "))).stdout == shown_after(
            nights
        )
        check = "cronchain db upgrade\ncronchain apply shop.yaml --dry-run -v\n"
        said = [
            cronchain(*line.removeprefix("cronchain ").split()).stdout
            for line in check.splitlines()
        ]
        assert "".join(said) == shown_after(check)


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """gate.py's handler, served from ``tmp_path`` (where its flag file is looked for) on
    a free port: the page's fixed 8765 could be taken by a test beside this one."""
    spec = importlib.util.spec_from_file_location("tutorial_gate", TUTORIALS / "gate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    with serving(HTTPServer(("127.0.0.1", 0), module.Ready)) as port:
        yield f"http://127.0.0.1:{port}/ready"


def answer(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_workflow_tutorials_gate_opens_and_closes_with_its_file(gate: str, tmp_path: Path):
    assert "http://127.0.0.1:8765/ready" in (TUTORIALS / "workflow.yaml").read_text()
    assert answer(gate) == (503, "closed")
    (tmp_path / "shop-open").touch()  # `touch shop-open`
    assert answer(gate) == (200, "open")
    (tmp_path / "shop-open").unlink()  # `rm shop-open`
    assert answer(gate) == (503, "closed")
