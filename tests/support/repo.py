"""The repository the tests run in, and what its manual (the README and the site's
pages under docs/) says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ARCHIVE = "benchmarks-archive.md"


def manual() -> str:
    """The README and every page of the site, as one text: what a user is pointed to
    (not the benchmark diary's archive, which holds old text on purpose)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and p.name != ARCHIVE)
    return "\n\n".join(p.read_text() for p in [ROOT / "README.md", *pages])


def manual_block(first_line: str) -> str:
    """The manual's one yaml block that starts with ``first_line``."""
    blocks = re.findall(r"```yaml\n(.*?)```", manual(), re.S)
    [block] = {b for b in blocks if b.startswith(first_line)}
    return block
