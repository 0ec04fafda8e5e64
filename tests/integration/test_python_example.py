"""The Python reference's example runs as written: the code block is read from
docs/reference/python.md and run as a new user would, in a process of its own on the
embedded default (SQLite and the filesystem broker under ``CRONCHAIN_HOME``, here a
temporary folder), so that the manual and the code cannot drift apart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_example() -> str:
    """The first ``python`` code block of the Python reference (docs/reference/python.md)."""
    text = (ROOT / "docs" / "reference" / "python.md").read_text()
    block = re.search(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert block is not None, "the Python reference has no python code block"
    return block.group(1)


def test_the_python_example_runs_as_written(tmp_path: Path):
    code = python_example()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONCHAIN_")}
    env |= {"CRONCHAIN_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "home" / "cronchain.db").exists()  # the embedded database, nowhere else
