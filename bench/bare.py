"""The floor under any scheduler built on Celery: a bare Celery app given each herd at once.

``bench.fire_rate --systems bare`` runs the baselines' worker (``bench.beat_app``, the
same flags) with no beat: ``BareHerds``, a thread of the benchmark, sends one empty task
per fire at each herd's instant instead, the same slots as the scheduled systems'. The
time to drain a herd is then what a Celery worker needs just to start a task per fire, a
floor for any scheduler that sends one; cronchain's chain sends none per fire (a herd's
ticks are one message) and its work path claims runs from PostgreSQL.

Each herd is staged ahead of its instant in a list the worker does not read
(``STAGING``), every message stamped with its slot as beat's are, then moved onto the
worker's queue by one Lua script at the instant (a few milliseconds for 10,000): the
worker finds the whole herd queued at once, as if a scheduler had published it in no
time, and the staging is done before the instant rather than while the worker drains.
"""

from __future__ import annotations

import threading
import time

import redis
from celery import Celery

from bench.herds import herd_members, next_instant

STAGING = "bench.staging"
QUEUE = "celery"  # the default queue, which the baselines' worker reads
MOVE = """
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') do moved = moved + 1 end
return moved
"""


class BareHerds:
    """``with BareHerds(broker, jobs, period, step) as sender:`` sends every herd from the
    next instant on until the block ends. ``cpu`` is the thread's CPU so far (staging and
    moving), updated after each herd; ``late``, by instant, how long after it each herd
    was queued."""

    def __init__(self, broker: str, jobs: int, period: float, step: float) -> None:
        self.broker, self.jobs, self.period, self.step = broker, jobs, period, step
        self.members = herd_members(jobs, period, step)
        self.cpu = 0.0
        self.late: dict[float, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BareHerds:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        app = Celery(broker=self.broker)
        move = redis.Redis.from_url(self.broker).register_script(MOVE)
        # Seconds before an instant to start staging its herd: at first 1 ms a message,
        # then half as long again as the last herd took.
        lead = 1.0 + 0.001 * max(map(len, self.members.values()))
        instant = next_instant(self.jobs, self.period, self.step, time.time() + lead)
        while not self._stop.wait(max(0.0, instant - lead - time.time())):
            members = self.members[round(instant * 1000) % round(self.period * 1000)]
            began = time.monotonic()
            with app.producer_or_acquire() as producer:
                for i in members:
                    app.send_task(
                        "bench.noop",
                        args=(i,),
                        queue=STAGING,
                        headers={"bench_slot": instant},
                        producer=producer,
                    )
            lead = 0.5 + 1.5 * (time.monotonic() - began)
            if self._stop.wait(max(0.0, instant - time.time())):
                return
            move(keys=[STAGING, QUEUE])
            self.late[instant] = time.time() - instant
            self.cpu = time.thread_time()
            instant = next_instant(self.jobs, self.period, self.step, instant)
