"""How cronchain's own workers log: a line a person can read per run outcome, which path
said it, and nothing of Celery's per-task chatter unless asked for.

A deployment's log is read for what happened to runs. Celery's INFO lines say what
happened to messages: two per task (``received``, ``succeeded in``), and cronchain's
control path sends several tasks per run (ticks, starts, the watchdog). So in
cronchain's workers, at any level but DEBUG, those loggers (``celery.app.trace``,
``celery.worker.strategy``; beat's ``Sending due task`` lines) log warnings only, and each
run's end is one line (``scheduler.core.runs``): its job, slot, attempt, status, duration
and error, at WARNING when it failed.

Each line names its path, ``control`` or ``work`` (or ``control+work``, a worker that
consumes both queues), from the queues the worker consumes; ``CRONCHAIN_LOG_FORMAT=json``
writes one JSON object per line instead, for a log shipper, with an outcome's fields
(``job``, ``slot``, ``attempt``, ``status``, ``duration``) as keys of their own.

Installed by cronchain's app (``cronchain.tasks``) through Celery's logging signals; a
user's worker (``install``) keeps its own logging.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger, celeryd_after_setup

from cronchain.scheduler.settings import Settings

CHATTER = ("celery.app.trace", "celery.worker.strategy")
BEAT = "celery.beat"  # its "Scheduler: Sending due task" lines: one per send
TEXT = "[%(asctime)s: %(levelname)s/%(processName)s] %(cronchain_path)s: %(message)s"
# What an outcome line carries besides its text (``extra=`` of the log call).
OUTCOME_FIELDS = ("job", "slot", "attempt", "status", "duration", "error")
_path = "cronchain"  # this worker's path, once it knows its queues


def path_of(queues: set[str], queue: str, work_queue: str) -> str:
    """The path a worker that consumes ``queues`` serves: control, work or both."""
    named = [name for name, q in (("control", queue), ("work", work_queue)) if q in queues]
    return "+".join(named) or "cronchain"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, process, path,
    message, an outcome's fields, and a traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "path": getattr(record, "cronchain_path", _path),
            "message": record.getMessage(),
        }
        line |= {k: getattr(record, k) for k in OUTCOME_FIELDS if hasattr(record, k)}
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def install() -> None:
    """Connect the handlers (cronchain's app does, as it is imported)."""
    previous = logging.getLogRecordFactory()

    def with_path(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.cronchain_path = _path
        return record

    logging.setLogRecordFactory(with_path)
    celeryd_after_setup.connect(_know_path, weak=False)
    after_setup_logger.connect(_set_up, weak=False)
    after_setup_task_logger.connect(_set_up, weak=False)


class _NoSends(logging.Filter):
    """Beat's INFO line for each task it sends goes; its others (``Starting...``) stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Scheduler: Sending due task")


def _know_path(sender: Any, instance: Any, **_: Any) -> None:
    global _path
    settings = Settings.from_env()
    queues = set(instance.app.amqp.queues.consume_from or ())
    _path = path_of(queues, settings.queue, settings.work_queue)


def _set_up(logger: logging.Logger, loglevel: int | str | None = None, **_: Any) -> None:
    level = logging.getLevelName(loglevel) if isinstance(loglevel, str) else loglevel
    if level is None or level > logging.DEBUG:
        for name in CHATTER:
            logging.getLogger(name).setLevel(logging.WARNING)
        beat = logging.getLogger(BEAT)
        if not any(isinstance(f, _NoSends) for f in beat.filters):
            beat.addFilter(_NoSends())
    json_lines = Settings.from_env().log_format == "json"
    formatter = JsonFormatter() if json_lines else logging.Formatter(TEXT)
    for handler in logger.handlers:
        handler.setFormatter(formatter)
