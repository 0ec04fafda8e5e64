"""cronchain's worker processes leave what they have once their runtime is made to the end
of the process (``gc.freeze``): the collector's full passes then walk only what their
tasks make (``scheduler.workers.heap``). Users' workers, which run cronchain's hooks
through ``Runtime.current`` too, are left alone."""

from __future__ import annotations

import gc
import os
import weakref
from types import SimpleNamespace

import pytest
from celery import Celery, current_app
from celery.concurrency import prefork, thread
from celery.signals import worker_before_create_process, worker_init
from kombu.asynchronous.timer import Timer

from cronchain.scheduler.errors import ConfigError
from cronchain.scheduler.workers import heap, runtime
from cronchain.tasks import chain


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
    threshold = gc.get_threshold()
    yield made
    gc.unfreeze()  # this test process goes on
    gc.set_threshold(*threshold)


def test_a_worker_process_freezes_once_its_runtime_is_made(unfrozen: list[object]):
    heap.freeze("ready")  # a worker of threads: ready first, its runtime made later
    gc.unfreeze()
    first = chain.runtime()
    assert gc.get_freeze_count() > 0, "the runtime made after ready: not frozen"
    assert heap._frozen == {(os.getpid(), "ready"), (os.getpid(), "runtime")}
    assert gc.get_threshold()[0] == heap.YOUNG
    gc.unfreeze()
    assert chain.runtime() is first
    assert gc.get_freeze_count() == 0, "frozen again"
    assert len(unfrozen) == 1


def test_a_user_s_worker_that_runs_the_hooks_is_not_frozen(unfrozen: list[object]):
    before = gc.get_freeze_count()
    threshold = gc.get_threshold()
    runtime.Runtime.current(None)  # type: ignore[arg-type]  # as the hooks call it
    assert gc.get_freeze_count() == before
    assert gc.get_threshold() == threshold
    assert heap._frozen == set()


class _Weak:
    """An object in a cycle that can be watched by a weak reference (a list cannot)."""

    def __init__(self, cycle: list[object]) -> None:
        self.cycle = cycle
        cycle.append(self)


def _consumer(pool: object) -> SimpleNamespace:
    return SimpleNamespace(app=chain.app, pool=pool, timer=Timer())


def _repeated(timer: Timer) -> dict[object, object]:
    """What a timer calls repeatedly: its function, and the entry that calls it."""
    return {scheduled.entry.fun.__wrapped__: scheduled.entry for scheduled in timer.queue}


def test_a_prefork_worker_s_main_process_keeps_what_it_holds_frozen(unfrozen: list[object]):
    consumer = _consumer(prefork.TaskPool(limit=1))
    chain._freeze_heap(consumer)
    entries = _repeated(consumer.timer)
    assert set(entries) == {heap.freeze_new, heap.collect_frozen}
    gc.disable()  # no collection but the one asked for
    try:
        held = [[n] for n in range(1000)]  # ticks the consumer holds for their ETA
        dead: list[object] = []
        gone = weakref.ref(_Weak(dead))
        del dead
        before = gc.get_freeze_count()
        entries[heap.freeze_new]()  # type: ignore[operator]
    finally:
        gc.enable()
    assert gc.get_freeze_count() >= before + len(held)
    assert gone() is None, "a dead cycle made since the last collection was frozen"


def test_the_hourly_pass_collects_a_cycle_that_froze_alive(unfrozen: list[object]):
    chain._freeze_heap(consumer := _consumer(prefork.TaskPool(limit=1)))
    cycle: list[object] = []
    gone = weakref.ref(_Weak(cycle))
    gc.freeze()
    del cycle
    gc.collect()
    assert gone() is not None, "frozen: no pass walks it"
    assert _repeated(consumer.timer)[heap.collect_frozen]() >= 2  # type: ignore[operator]
    assert gone() is None
    assert gc.get_freeze_count() > 0, "what is left is frozen again"


def test_a_worker_that_runs_its_tasks_in_its_own_process_is_not_kept_frozen(
    unfrozen: list[object],
):
    consumer = _consumer(thread.TaskPool(limit=1))
    chain._freeze_heap(consumer)
    assert consumer.timer.queue == []
    assert len(unfrozen) == 1, "its runtime is made when it is ready, not at its first task"
    assert (os.getpid(), "runtime") in heap._frozen


def _child_of(worker_app: Celery) -> None:
    """What a prefork child of ``worker_app``'s worker does as it starts."""
    before = current_app._get_current_object()
    worker_app.set_current()
    try:
        chain._make_child_runtime()
    finally:
        before.set_current()


def test_a_prefork_child_makes_its_runtime_before_its_first_task(unfrozen: list[object]):
    _child_of(chain.app)
    assert len(unfrozen) == 1
    assert (os.getpid(), "runtime") in heap._frozen


class _Worker:
    def __init__(self, app: Celery):
        self.app = app


def _forking(worker_app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the main process of ``worker_app``'s prefork worker does up to its first fork,
    with a user's app made current meanwhile (as a module of CRONCHAIN_IMPORTS may)."""
    monkeypatch.setattr(chain, "_ours", [])
    worker_init.send(sender=_Worker(worker_app))
    current = current_app._get_current_object()
    Celery("imported", set_as_current=True)
    try:
        worker_before_create_process.send(sender=None)
    finally:
        current.set_current()


def test_cronchain_s_prefork_worker_freezes_its_heap_before_it_forks(
    unfrozen: list[object], monkeypatch: pytest.MonkeyPatch
):
    # The child inherits it frozen: its own freeze walks only what it makes itself.
    gc.unfreeze()
    _forking(chain.app, monkeypatch)
    assert gc.get_freeze_count() > 0
    assert heap._frozen == {(os.getpid(), "fork")}


def test_a_user_s_worker_freezes_nothing_before_it_forks(
    unfrozen: list[object], monkeypatch: pytest.MonkeyPatch
):
    before = gc.get_freeze_count()
    current = current_app._get_current_object()
    chain.app.set_current()  # a user's worker that imported cronchain's tasks
    try:
        _forking(Celery("users", set_as_current=False), monkeypatch)
    finally:
        current.set_current()
    assert gc.get_freeze_count() == before
    assert heap._frozen == set()


def test_a_user_s_prefork_child_makes_no_runtime(unfrozen: list[object]):
    _child_of(Celery("users", set_as_current=False))
    assert unfrozen == []


def test_a_runtime_that_cannot_be_made_at_start_is_left_to_the_first_task(
    unfrozen: list[object], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def broken(cls: type, app: object = None) -> object:
        raise ConfigError("CRONCHAIN_DATABASE_URL", "not a URL")

    monkeypatch.setattr(runtime.Runtime, "from_env", classmethod(broken))
    _child_of(chain.app)  # does not raise: the child lives on
    assert "runtime could not be made" in caplog.text
    assert (os.getpid(), "runtime") not in heap._frozen, "frozen without its runtime"
    with pytest.raises(ConfigError):
        chain.runtime()  # its first task says why again
