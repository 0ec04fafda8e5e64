"""The order in which the suite hands its tests out (``tests/conftest.py``).

The tests that wait on real processes (end-to-end and faults) are spread among the
in-process ones, all within the first part of the run: one after another, they left the
cores idle a third of the time while their deployments waited, and the in-process tests
then ran alone at the end. Tests that share a module-scoped fixture stay together, so
that a run in one process (``TEST_WORKERS=1``) builds that fixture once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
WAITING = ("tests/faults/", "tests/e2e/")  # the fault suite's first: its tests are longest
SPREAD = 0.4  # the waiting tests are handed out over this share of the others


def interleaved(
    items: Sequence[Item], unit: Callable[[Item], str], spread: float = SPREAD
) -> list[Item]:
    """``items`` with the waiting tests' units (``unit``: the same key for the tests that
    must stay together) one by one among the others', evenly over their first
    ``spread``; each kind in the order collected."""
    units: dict[str, list[Item]] = {}
    for item in items:
        units.setdefault(unit(item), []).append(item)

    def kind(key: str) -> int:
        return next((n for n, folder in enumerate(WAITING) if key.startswith(folder)), -1)

    waiting = sorted((k for k in units if kind(k) >= 0), key=kind)  # stable: collected order
    others = [k for k in units if kind(k) < 0]
    if not waiting or not others:
        return list(items)
    every = max(1, int(len(others) * spread / len(waiting)))
    order: list[str] = []
    for n, key in enumerate(waiting):
        order += [key, *others[n * every : (n + 1) * every]]
    order += others[len(waiting) * every :]
    return [item for key in order for item in units[key]]
