"""The suite's own layout (issue 36): what tests share lives in ``tests/support``; no module
under tests/ imports from a test module (``test_*.py``), whose helpers would otherwise be
copied, or pulled in with its tests, wherever another test needs one."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path, root: Path) -> list[str]:
    """Every module ``path`` (a file under the package folder ``root``) imports, anywhere
    in it (in functions too), as dotted names; a relative import is resolved against the
    package ``path`` is in, and ``from A import B`` names ``A`` and ``A.B`` (B may be a
    module)."""
    package = path.relative_to(root.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return found


def is_test_module(name: str) -> bool:
    """A module of the suite's tests (``tests.….test_*``), not a helper of theirs."""
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def imports_of_test_modules(root: Path) -> list[str]:
    """``FILE imports MODULE`` for each import of a test module under ``root``."""
    return [
        f"{path.relative_to(root.parent)} imports {name}"
        for path in sorted(root.rglob("*.py"))
        for name in imported_modules(path, root)
        if is_test_module(name)
    ]


def test_no_module_under_tests_imports_a_test_module() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_the_check_finds_every_spelling_of_such_an_import(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "integration").mkdir(parents=True)
    (root / "integration" / "test_b.py").write_text(
        "from tests.integration.test_a import helper\n"
        "from tests.integration import test_a\n"
        "from .test_a import helper\n"
        "from . import test_a\n"
        "import tests.integration.test_a\n"
        "def f():\n    from tests.unit.test_c import other\n"
        "from tests.support.rows import rows\n"  # not a test module: allowed
    )
    found = [line.split(" imports ")[1] for line in imports_of_test_modules(root)]
    assert found == ["tests.integration.test_a"] * 5 + ["tests.unit.test_c"]
