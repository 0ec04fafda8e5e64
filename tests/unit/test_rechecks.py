"""The rechecks thread: jobs queued together are looked at together, in another thread,
and a failure does not stop it."""

from __future__ import annotations

import threading

from scheduler.rechecks import Rechecks


def test_jobs_are_looked_at_in_a_thread_and_a_failure_does_not_stop_it():
    seen: list[tuple[list[int], str]] = []
    done, entered, gate = threading.Event(), threading.Event(), threading.Event()

    def recheck(job_ids: list[int]) -> None:
        entered.set()
        gate.wait(5)
        seen.append((job_ids, threading.current_thread().name))
        if job_ids == [1]:
            raise RuntimeError("a bug")
        if 9 in job_ids:
            done.set()

    rechecks = Rechecks(recheck)
    rechecks.put([1])  # taken at once, and held at the gate
    assert entered.wait(5)
    rechecks.put([3, 2])
    rechecks.put([9])  # queued meanwhile: looked at together
    gate.set()
    assert done.wait(5)
    assert [ids for ids, _ in seen] == [[1], [2, 3, 9]]
    assert {name for _, name in seen} == {"cronchain-rechecks"}
