"""The order the suite hands its tests out in (``tests.support.order``)."""

from __future__ import annotations

from itertools import pairwise

from tests.support.order import interleaved


def _ids(folder: str, n: int, module: str = "test_x") -> list[str]:
    return [f"tests/{folder}/{module}.py::test_{i}" for i in range(n)]


def _unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return path if path.endswith("test_shared.py") else nodeid  # a module fixture's tests


def test_the_waiting_tests_are_handed_out_early_one_at_a_time_faults_first() -> None:
    collected = [*_ids("e2e", 4), *_ids("faults", 2), *_ids("integration", 50), *_ids("unit", 50)]
    order = interleaved(collected, _unit, 0.4)
    assert sorted(order) == sorted(collected)  # each once, none dropped
    places = sorted(order.index(n) for n in collected[:6])
    assert places[-1] < 0.45 * len(order)
    assert [order[p].split("/")[1] for p in places] == ["faults"] * 2 + ["e2e"] * 4
    assert all(b - a > 1 for a, b in pairwise(places))  # never two in a row
    others = [n for n in order if n not in collected[:6]]
    assert others == collected[6:]  # the rest as collected


def test_tests_that_share_a_module_fixture_stay_together() -> None:
    shared = _ids("e2e", 3, "test_shared")
    collected = [*shared, *_ids("e2e", 2), *_ids("integration", 30)]
    order = interleaved(collected, _unit, 0.4)
    start = order.index(shared[0])
    assert order[start : start + 3] == shared


def test_a_run_of_one_kind_is_left_as_collected() -> None:
    assert interleaved(_ids("unit", 5), _unit) == _ids("unit", 5)
    assert interleaved(_ids("e2e", 5), _unit) == _ids("e2e", 5)
