"""cronchain's worker processes leave what they have once their runtime is made to the end
of the process (``gc.freeze``): the collector's full passes then walk only what their
tasks make (``scheduler.workers.heap``). Users' workers, which run cronchain's hooks
through ``Runtime.current`` too, are left alone."""

from __future__ import annotations

import gc
import os

import pytest

from scheduler.workers import heap, runtime
from tasks import chain


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """This process, as a worker process before its first task; unfrozen after."""
    made: list[object] = []

    def from_env(cls: type, app: object = None) -> object:
        made.append(object())
        return made[-1]

    monkeypatch.setattr(runtime, "_current", None)
    monkeypatch.setattr(runtime.Runtime, "from_env", classmethod(from_env))
    monkeypatch.setattr(heap, "_frozen", set())
    yield made
    gc.unfreeze()  # this test process goes on


def test_a_worker_process_freezes_once_its_runtime_is_made(unfrozen: list[object]):
    heap.freeze("ready")  # a worker of threads: ready first, its runtime made later
    gc.unfreeze()
    first = chain.runtime()
    assert gc.get_freeze_count() > 0, "the runtime made after ready: not frozen"
    assert heap._frozen == {(os.getpid(), "ready"), (os.getpid(), "runtime")}
    gc.unfreeze()
    assert chain.runtime() is first
    assert gc.get_freeze_count() == 0, "frozen again"
    assert len(unfrozen) == 1


def test_a_user_s_worker_that_runs_the_hooks_is_not_frozen(unfrozen: list[object]):
    before = gc.get_freeze_count()
    runtime.Runtime.current(None)  # type: ignore[arg-type]  # as the hooks call it
    assert gc.get_freeze_count() == before
    assert heap._frozen == set()
