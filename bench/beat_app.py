"""The baseline: the same load on Celery's own beat, or on RedBeat, sending a no-op task.

``celery -A bench.beat_app beat|worker``. ``BENCH_BROKER``, ``BENCH_JOBS``,
``BENCH_PERIOD`` and ``BENCH_STEP`` (seconds) describe the load: entry i fires at
``bench.load.offset`` past each multiple of the period, the same slots as cronchain's
``every P offset O`` jobs.
Beat stamps each message with the slot it fires for as it publishes it; the worker
records its start time beside that slot and the entry's number (``started slot i``), so
lag is measured as cronchain's is, start of the run minus its slot, and each herd's fires
can be counted (``bench.herds``). ``bench.bare`` sends this app's task without beat, each
message stamped the same way.
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime, timedelta
from typing import Any

import redis
from celery import Celery
from celery.schedules import schedstate, schedule
from celery.signals import before_task_publish

from bench import load

BROKER = os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/0")
JOBS = int(os.environ.get("BENCH_JOBS", "1000"))
PERIOD = float(os.environ.get("BENCH_PERIOD", "10"))
STEP = float(os.environ.get("BENCH_STEP", "0"))
LAGS = "bench:lags"

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_prefetch_multiplier=8,
    timezone="UTC",
    enable_utc=True,
    redbeat_redis_url=BROKER,
    # RedBeat holds a lock for five max-intervals by default, 5 s at ``--max-interval 1``;
    # a pass that sends a herd of 10,000 can last longer, and beat exits when it finds the
    # lock lost. A long lock lets its time to send a herd be measured instead.
    redbeat_lock_timeout=300,
    beat_max_loop_interval=1,
)


def offset(i: int) -> float:
    return load.offset(i, JOBS, PERIOD, STEP)


def latest_slot(i: int, t: float) -> float:
    return math.floor((t - offset(i)) / PERIOD) * PERIOD + offset(i)


class Slotted(schedule):
    """Due at fixed slots (``offset`` past each multiple of ``period``), like a cron,
    rather than an interval after the last run, which drifts by each run's lateness."""

    def __init__(self, period: float, offset: float):
        super().__init__(run_every=timedelta(seconds=period))
        self.period, self.offset = period, offset

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.period, self.offset)

    def _latest(self, t: float) -> float:
        return math.floor((t - self.offset) / self.period) * self.period + self.offset

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        due = self._latest(last_run_at.timestamp()) + self.period
        return timedelta(seconds=due - time.time())

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = time.time()
        latest = self._latest(now)
        if latest > last_run_at.timestamp():
            return schedstate(True, latest + self.period - now)
        return schedstate(False, latest + self.period - now)


app.conf.beat_schedule = {
    f"noop{i}": {"task": "bench.noop", "schedule": Slotted(PERIOD, offset(i)), "args": (i,)}
    for i in range(JOBS)
}


@before_task_publish.connect
def _stamp(sender: str | None = None, headers: dict | None = None, body: Any = None, **_: Any):  # type: ignore[no-untyped-def]
    if sender == "bench.noop" and headers is not None:
        headers["bench_slot"] = latest_slot(body[0][0], time.time())


_records = redis.Redis.from_url(BROKER)


@app.task(name="bench.noop", bind=True)
def noop(self: Any, i: int) -> None:
    started = time.time()
    slot = getattr(self.request, "bench_slot", None)
    if slot is not None:
        _records.rpush(LAGS, f"{started} {slot} {i}")


def _redbeat_codec() -> None:
    """RedBeat stores schedules as JSON and knows only its own kinds: teach it Slotted."""
    try:
        from redbeat import decoder
    except ImportError:
        return
    encode, decode = decoder.RedBeatJSONEncoder.default, decoder.RedBeatJSONDecoder.dict_to_object

    def default(self: Any, obj: Any) -> Any:
        if isinstance(obj, Slotted):
            return {"__type__": "slotted", "period": obj.period, "offset": obj.offset}
        return encode(self, obj)

    def dict_to_object(self: Any, d: dict[str, Any]) -> Any:
        if d.get("__type__") == "slotted":
            return Slotted(d["period"], d["offset"])
        return decode(self, d)

    decoder.RedBeatJSONEncoder.default = default
    decoder.RedBeatJSONDecoder.dict_to_object = dict_to_object


_redbeat_codec()
