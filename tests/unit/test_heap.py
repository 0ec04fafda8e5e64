"""A worker process leaves what it has once its runtime is made to the end of the process
(``gc.freeze``): the collector's full passes then walk only what its tasks make
(``scheduler.workers.heap``)."""

from __future__ import annotations

import gc

import pytest

from scheduler.workers import runtime


def test_a_process_s_heap_is_frozen_once_its_runtime_is_made(monkeypatch: pytest.MonkeyPatch):
    made: list[object] = []

    def from_env(cls: type, app: object = None) -> object:
        made.append(object())
        return made[-1]

    monkeypatch.setattr(runtime, "_current", None)
    monkeypatch.setattr(runtime.Runtime, "from_env", classmethod(from_env))
    before = gc.get_freeze_count()
    try:
        first = runtime.Runtime.current(None)  # type: ignore[arg-type]
        frozen = gc.get_freeze_count()
        assert runtime.Runtime.current(None) is first  # type: ignore[arg-type]
        assert gc.get_freeze_count() == frozen  # once, when made
    finally:
        gc.unfreeze()  # this test process goes on
    assert frozen > before
    assert len(made) == 1
