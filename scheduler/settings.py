"""Settings from the environment: one place that knows every ``CRONCHAIN_*`` variable.

With nothing set, cronchain runs embedded: SQLite (WAL) and Celery's filesystem
transport under ``CRONCHAIN_HOME`` (default ``./.cronchain``), so that ``cronchain up``
works with nothing installed but the package.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

# Far below the Redis visibility timeout (celeryconfig sets 1 h), so that an ETA message is
# never redelivered while it waits; ticks further away hop.
ETA_HORIZON = timedelta(minutes=5)
VISIBILITY_TIMEOUT = timedelta(hours=1)
# Ticks due at the same instant share a message, this many at most: enough to spare
# Celery most of its per-task cost, few enough that the batch's last job is not late.
TICK_BATCH = 20
# A tick goes out at the next multiple of this at or after its slot, so that ticks due a
# few milliseconds apart share a message (and Celery's per-task cost) as well: a fire may
# start this much later than its slot, never earlier. It divides a second, so that
# cron's whole-second slots go out on time. bench.fire_rate, 10k jobs at 200 fires/s
# spread over milliseconds, lag p50/p99: 10 ms 8/170, 20 ms 17/86, 25 ms 21/31, 40 ms
# 33/41 (the fewer messages, the less CPU and queueing; the wider, the later).
TICK_SLACK = timedelta(milliseconds=25)
# Runs of the noop and http kinds wait on endpoints: they run on the work path, a worker
# of its own with a pool of threads, so that no endpoint can make a tick late.
WORK_CONCURRENCY = 100


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str
    home: Path
    watchdog_interval: float
    queue: str = "cronchain"
    work_queue: str = "cronchain.work"  # the work path: runs of the noop and http kinds
    work_concurrency: int = WORK_CONCURRENCY  # threads of the work path's worker
    imports: tuple[str, ...] = ()
    http_allow: str = ""  # addresses/networks the http kind may call besides public ones
    jobs_dir: Path | None = None  # job files that beat reconciles on an interval
    reconcile_interval: float = 60.0
    tick_batch: int = TICK_BATCH
    tick_slack: timedelta = TICK_SLACK

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith("filesystem://")

    @property
    def watchdog_grace(self) -> timedelta:
        """How late a promised step may be before the watchdog assumes it was lost.

        Half an interval: a lost step is then repaired by the watchdog run that follows
        its deadline, so within one and a half intervals of when it was due."""
        return timedelta(seconds=self.watchdog_interval / 2)

    @property
    def broker_folder(self) -> Path:
        return self.home / "broker"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("CRONCHAIN_HOME") or ".cronchain").resolve()
        interval = float(env.get("CRONCHAIN_WATCHDOG_INTERVAL") or 30)
        if interval <= 0:
            raise ValueError("CRONCHAIN_WATCHDOG_INTERVAL must be a positive number of seconds")
        imports = tuple(m for m in (env.get("CRONCHAIN_IMPORTS") or "").split(",") if m.strip())
        reconcile = float(env.get("CRONCHAIN_RECONCILE_INTERVAL") or 60)
        if reconcile <= 0:
            raise ValueError("CRONCHAIN_RECONCILE_INTERVAL must be a positive number of seconds")
        jobs_dir = env.get("CRONCHAIN_JOBS_DIR")
        tick_batch = int(env.get("CRONCHAIN_TICK_BATCH") or TICK_BATCH)
        if tick_batch < 1:
            raise ValueError("CRONCHAIN_TICK_BATCH must be a positive number of ticks")
        ms = timedelta(milliseconds=1)
        slack_ms = int(env.get("CRONCHAIN_TICK_SLACK_MS") or TICK_SLACK // ms)
        if not 0 <= slack_ms <= 1000 or (slack_ms and 1000 % slack_ms):
            raise ValueError(
                "CRONCHAIN_TICK_SLACK_MS must divide a second (0, 1, 2, 4, 5, 8, 10, 20, 25,"
                " 40, 50, 100, 125, 200, 250, 500 or 1000 milliseconds)"
            )
        work_concurrency = int(env.get("CRONCHAIN_WORK_CONCURRENCY") or WORK_CONCURRENCY)
        if work_concurrency < 1:
            raise ValueError("CRONCHAIN_WORK_CONCURRENCY must be a positive number of threads")
        return cls(
            database_url=env.get("CRONCHAIN_DATABASE_URL") or f"sqlite:///{home}/cronchain.db",
            broker_url=env.get("CRONCHAIN_BROKER_URL") or "filesystem://",
            home=home,
            watchdog_interval=interval,
            queue=env.get("CRONCHAIN_QUEUE") or "cronchain",
            work_queue=env.get("CRONCHAIN_WORK_QUEUE") or "cronchain.work",
            work_concurrency=work_concurrency,
            imports=tuple(m.strip() for m in imports),
            http_allow=env.get("CRONCHAIN_HTTP_ALLOW") or "",
            jobs_dir=Path(jobs_dir).resolve() if jobs_dir else None,
            reconcile_interval=reconcile,
            tick_batch=tick_batch,
            tick_slack=timedelta(milliseconds=slack_ms),
        )
