"""Celery beat's side of the README's "Beside Celery beat" table, measured.

Real ``celery beat`` processes of a plain Celery app (the default PersistentScheduler,
one schedule file per beat, as on separate machines) against a private redis-server, with
no worker: the task messages beat sent stay in the queue's Redis list, so the list is
exactly what beat produced, and a thread notes when each message appeared. cronchain's
side of the table is measured elsewhere: a second beat in the fault suite
(tests/faults/rig.py), an outage under each misfire policy (tests/e2e/test_time.py), an
edited schedule (tests/e2e/test_import_beat.py).

Run with ``pytest -s`` to see the figures."""

from __future__ import annotations

import json
import math
import shelve
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.e2e.harness import Cluster
from tests.support.services import redis_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

APP = """
import os

from celery import Celery

app = Celery("plain", broker=os.environ["BEAT_BROKER_URL"])
app.config_from_object("beatconfig")  # beat_schedule lives there
"""

QUEUE = "celery"  # the default queue: kombu LPUSHes each message onto this list


def write_schedule(folder: Path, seconds: float) -> None:
    """The app's beat_schedule: one entry ``tick`` every ``seconds``."""
    entry = {"task": "plain.tick", "schedule": seconds, "args": ["tick"]}
    (folder / "beatconfig.py").write_text(f"beat_schedule = {{'tick': {entry!r}}}\n")


class QueueWatch:
    """The queue's length polled every 20 ms from a thread: ``seen[i]`` is the monotonic
    time at which beat's i-th message was first in the list (nothing consumes it)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.seen: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            length = self.client.llen(QUEUE)
            now = time.monotonic()
            self.seen.extend([now] * (length - len(self.seen)))
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, n: int, timeout: float = 15) -> float:
        """When the n-th message (counting from 1) appeared."""
        wait_until(lambda: len(self.seen) >= n, timeout, f"beat's message {n}")
        return self.seen[n - 1]

    def between(self, start: float, end: float = math.inf) -> list[float]:
        return [t for t in self.seen if start <= t < end]

    def origins(self) -> list[str]:
        """Each message's ``origin`` header, oldest first: ``gen<pid>@<host>`` of the
        process that sent it."""
        raw = reversed(self.client.lrange(QUEUE, 0, -1))
        messages = [json.loads(m) for m in raw]
        assert {m["headers"]["task"] for m in messages} <= {"plain.tick"}
        return [m["headers"]["origin"] for m in messages]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in zip(times, times[1:], strict=False)]


def sleep_until(deadline: float) -> None:
    """The one kind of fixed wait here: a window in which to count beat's rate."""
    time.sleep(max(0.0, deadline - time.monotonic()))


@pytest.fixture
def beats(tmp_path: Path) -> Iterator[tuple[Cluster, QueueWatch]]:
    (tmp_path / "app.py").write_text(APP)
    with redis_server(tmp_path) as server:
        cluster = Cluster.create(
            tmp_path,
            BEAT_BROKER_URL=server.url,
            PYTHONPATH=str(tmp_path),
            PYTHONDONTWRITEBYTECODE="1",  # an edited beatconfig.py is read afresh
        )
        queue = QueueWatch(server.client())
        yield cluster, queue
        cluster.stop_all()
        queue.close()


def start_beat(cluster: Cluster, name: str) -> int:
    """``celery -A app beat`` with the schedule file ``<name>.schedule``; its pid."""
    schedule = str(cluster.folder / f"{name}.schedule")
    cluster.start(
        name,
        *(sys.executable, "-m", "celery", "-A", "app", "beat"),
        *("--loglevel", "INFO", "--schedule", schedule),
    )
    return cluster.processes[name].pid


def test_two_beats_send_each_run_twice(beats: tuple[Cluster, QueueWatch]):
    cluster, queue = beats
    write_schedule(cluster.folder, 1.0)
    start_beat(cluster, "a")
    start = queue.wait_for(1) + 0.5  # between two of beat a's runs
    sleep_until(start + 5)
    alone = len(queue.between(start, start + 5))

    pid = start_beat(cluster, "b")
    sent = len(queue.seen)

    def b_has_sent() -> bool:
        return any(o.startswith(f"gen{pid}@") for o in queue.origins()[sent:])

    wait_until(b_has_sent, 15, "the second beat's first message")
    start = time.monotonic()
    sleep_until(start + 6)
    window = queue.between(start, start + 6)
    first = queue.seen.index(window[0])
    by_beat = Counter(queue.origins()[first : first + len(window)])
    print(
        f"\none beat: {alone} messages in 5 s; two beats: {len(window)} messages in 6 s,"
        f" per beat {sorted(by_beat.values())}"
    )
    assert 0.7 * 5 <= alone <= 1.3 * 5
    assert len(window) >= 1.6 * 6, "two beats should send every run twice"
    assert len(by_beat) == 2
    assert min(by_beat.values()) >= 0.7 * 6


def test_an_outage_leaves_one_run_and_no_record_of_the_others(
    beats: tuple[Cluster, QueueWatch],
):
    cluster, queue = beats
    write_schedule(cluster.folder, 2.0)
    start_beat(cluster, "beat")
    queue.wait_for(1)
    cluster.kill("beat", signal.SIGTERM)  # a clean stop: beat saves its schedule file
    before = len(queue.seen)
    last = queue.seen[-1]
    sleep_until(last + 8.5)  # down past the slots at +2, +4, +6 and +8 s

    restarted = time.monotonic()
    start_beat(cluster, "beat")  # the same schedule file
    back = queue.wait_for(before + 1)
    missed = int((back - last - 0.2) // 2.0)  # the slots last + 2k before it
    sleep_until(back + 3)
    burst = queue.between(back, back + 1)
    after = queue.between(back, back + 3)
    cluster.kill("beat", signal.SIGTERM)
    with shelve.open(str(cluster.folder / "beat.schedule"), flag="r") as stored:
        runs = stored["entries"]["tick"].total_run_count
    print(
        f"\n{back - last:.1f} s from the last run before the stop to the first after the"
        f" restart ({back - restarted:.1f} s after starting the process): {missed} slots"
        f" missed; {len(burst)} message in its first 1 s, {len(after)} in 3 s, gaps"
        f" {gaps(after)} s, {(back - last) % 2.0:.2f} s off the old 2 s grid; the schedule file"
        f" counts {runs} runs for {len(queue.seen)} messages"
    )
    assert missed >= 4
    assert len(burst) == 1, "beat sends one run for the whole outage"
    assert len(after) == 2 and 1.7 <= after[1] - after[0] <= 2.5  # then every 2 s again
    assert runs == len(queue.seen)  # the missed slots are nowhere


def test_an_edited_schedule_waits_for_a_restart(beats: tuple[Cluster, QueueWatch]):
    cluster, queue = beats
    write_schedule(cluster.folder, 1.0)
    start_beat(cluster, "beat")
    start = queue.wait_for(1)
    sleep_until(start + 3.5)
    before = queue.between(start)

    write_schedule(cluster.folder, 5.0)  # beat keeps running
    edited = time.monotonic()
    sleep_until(edited + 4)
    unchanged = queue.between(edited, edited + 4)

    cluster.kill("beat", signal.SIGTERM)
    sent = len(queue.seen)
    last = queue.seen[-1]
    start_beat(cluster, "beat")
    queue.wait_for(sent + 2, timeout=20)
    restarted = [last, *queue.seen[sent : sent + 2]]
    print(
        f"\nevery 1s: gaps {gaps(before)} s; edited to every 5s: {len(unchanged)}"
        f" messages in 4 s, gaps {gaps(unchanged)} s; after a restart: gaps"
        f" {gaps(restarted)} s"
    )
    assert len(unchanged) >= 3, "the running beat should not see the edit"
    assert all(gap <= 1.5 for gap in gaps(unchanged))
    assert all(4.5 <= gap <= 5.8 for gap in gaps(restarted))
