"""The rechecks thread: work on jobs is done in another thread, one job after the other,
the same work on one job once, and one's failure neither stops the thread nor drops the
others."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from celery import Celery

from cronchain.scheduler.core.rechecks import Rechecks
from cronchain.scheduler.workers.runtime import Runtime


def test_jobs_are_looked_at_in_a_thread_and_a_failure_drops_nothing_else():
    seen: list[tuple[list[int], str]] = []
    done, entered, gate = threading.Event(), threading.Event(), threading.Event()

    host = object()

    def recheck(given: object, job_ids: list[int]) -> None:
        assert given is host
        entered.set()
        gate.wait(5)
        seen.append((job_ids, threading.current_thread().name))
        if job_ids in ([1], [2]):
            raise RuntimeError("a bug")
        if job_ids == [9]:
            done.set()

    rechecks = Rechecks(host)
    rechecks.put(recheck, [1])  # taken at once, and held at the gate
    assert entered.wait(5)
    rechecks.put(recheck, [3, 2])
    rechecks.put(recheck, [3])  # queued already: once
    rechecks.put(recheck, [9])
    gate.set()
    assert done.wait(5)
    assert [ids for ids, _ in seen] == [[1], [2], [3], [9]]
    assert {name for _, name in seen} == {"cronchain-rechecks"}


def test_a_worker_s_engine_has_the_thread_and_a_command_s_has_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CRONCHAIN_HOME", str(tmp_path))
    for name in ("CRONCHAIN_DATABASE_URL", "CRONCHAIN_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    worker = Runtime.from_env(Celery("worker")).engine
    command = Runtime.for_command().engine
    try:
        assert isinstance(worker.rechecks, Rechecks)
        assert command.rechecks is None  # it exits when done: it looks again before that
    finally:
        worker.db.dispose()
        command.db.dispose()
