"""The repository the tests run in, and what its README says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_block(first_line: str) -> str:
    """The README's yaml block that starts with ``first_line``."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    [block] = [b for b in blocks if b.startswith(first_line)]
    return block
