"""docs/design.md names files and the plug-ins in them: each must exist, or the page
misleads the next engineer who follows it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "design.md"
PATH = r"`((?:scheduler|statemachine|tasks|tests|docs)/[\w/.]*|pyproject\.toml)`"


def test_every_file_the_design_page_names_exists() -> None:
    named = set(re.findall(PATH, PAGE.read_text()))
    assert len(named) > 20
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []


def test_the_holds_the_page_names_are_those_registered_in_its_order() -> None:
    from cronchain.scheduler.engine import PLUGINS

    text = PAGE.read_text()
    names = [f"`{type(hold).__name__}`" for hold in PLUGINS.holds]
    assert [text.index(name) for name in names] == sorted(text.index(name) for name in names)
