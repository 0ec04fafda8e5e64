"""One vocabulary of reasons: every writer names a reason from ``statemachine.reasons``,
and every word there has a meaning (the reference's table is written from it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cronchain.statemachine.reasons import MEANINGS, WAITING_REASONS, Reason, meaning_of

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    p
    for folder in ("scheduler", "statemachine", "tasks")
    for p in (ROOT / folder).rglob("*.py")
    if p.name != "reasons.py"
)
WORDS = {r.value for r in Reason}
# Where a reason is the n-th argument: Outcome(status, error, reason), Outcome.failed(
# error, reason), RecordSkipped(slot, reason), AbortActive(reason).
POSITION = {"Outcome": 2, "failed": 1, "RecordSkipped": 1, "AbortActive": 0}


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_reason(node: ast.AST) -> bool:
    """``x.reason``, ``x["reason"]`` or a name ``reason``."""
    return (
        (isinstance(node, ast.Attribute) and node.attr == "reason")
        or (isinstance(node, ast.Subscript) and _text(node.slice) == "reason")
        or (isinstance(node, ast.Name) and node.id == "reason")
    )


def _literals(node: ast.AST) -> list[ast.Constant]:
    """The string literals a value may be: itself, a branch of ``a if c else b``, an item
    of a tuple, list or set."""
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for item in node.elts for c in _literals(item)]
    return [node] if _text(node) is not None else []


def literal_reasons(source: str) -> list[tuple[int, str]]:
    """(line, word) of each reason written as a string literal where a reason goes: the
    reason argument or keyword of a writer, a ``"reason": ...`` entry, a name that holds
    reasons (``REASON``, ``reason``), or what a reason is compared with (a module's
    constant too: ``inv.reason in ENDED_HERE``)."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        said: list[ast.AST] = []
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            at = POSITION.get(name)
            if at is not None and len(node.args) > at:
                said.append(node.args[at])
            said += [k.value for k in node.keywords if k.arg == "reason"]
            if name == "in_" and _is_reason(func.value):  # type: ignore[union-attr]
                said += node.args
        elif isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            said += [v for k, v in pairs if k is not None and _text(k) == "reason"]
        elif isinstance(node, ast.Assign):
            named = [t for t in node.targets if isinstance(t, ast.Name)]
            if any("reason" in t.id.lower() for t in named):
                said.append(node.value)
        elif isinstance(node, ast.Compare) and _is_reason(node.left):
            for right in node.comparators:
                said.append(
                    constants.get(right.id, right) if isinstance(right, ast.Name) else right
                )
        found += [(c.lineno, c.value) for n in said for c in _literals(n) if c.value in WORDS]
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_writer_spells_a_reason_itself(path: Path) -> None:
    assert literal_reasons(path.read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        'Outcome.failed("no answer", "timeout")',
        'Outcome(S.ABORTED, "aborted by a user", "aborted")',
        'RecordSkipped(slot, "misfire")',
        'AbortActive("cancel_other")',
        'run_store.update_invocation(conn, inv, reason="pool")',
        'row = {"status": "SKIPPED", "reason": "paused"}',
        'if inv["reason"] == "upstream": pass',
        'if outcome.reason in ("timeout", "lease expired"): pass',
        'ENDED_HERE = ("timeout",)\nif outcome.reason in ENDED_HERE: pass',
        'reason = "paused" if suspended else "disabled"',
        'REASON = "gate"',
        'invocations.c.reason.in_(("gate", "pool"))',
    ],
)
def test_the_scan_finds_a_spelled_reason(source: str) -> None:
    assert literal_reasons(source), source


def test_a_pause_reason_or_an_error_may_be_a_reason_word() -> None:
    # What a user writes (a pause's reason) and an error's text are free, even when they
    # are the word of a reason: only the reason's place is checked.
    assert literal_reasons('Pause("paused"); Outcome.failed("timeout")') == []


def test_every_reason_has_a_meaning_and_is_written_somewhere() -> None:
    assert set(MEANINGS) == set(Reason)
    used = {
        node.attr
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "Reason"
    }
    assert {r.name for r in Reason} - used == set()


def test_the_words_read_as_before() -> None:
    # Stored rows, /metrics labels and scripts read these words: they never change.
    before = {
        *("overlap", "misfire", "paused", "disabled", "error", "status", "launch"),
        *("refused", "timeout", "lease expired", "schedule_to_start", "aborted"),
        *("cancel_other", "buffered", "backfill", "upstream", "gate", "pool"),
    }
    assert before == WORDS
    assert WAITING_REASONS == ("buffered", "backfill", "upstream", "gate", "pool")
    assert meaning_of("status") == "an http answer not in accept"  # backquotes are the page's
    assert not any("`" in meaning_of(r) for r in Reason)
    assert meaning_of("a word of an older version") == "a word of an older version"
