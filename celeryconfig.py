"""Every Celery setting cronchain uses, read from the environment (scheduler.settings).

``celery -A cronchain.tasks worker|beat|flower`` loads this module; so does the CLI when it sends a
message. Nothing here is specific to one process.
"""

from cronchain.scheduler.settings import VISIBILITY_TIMEOUT, WATCHDOG_LIFETIME, Settings
from cronchain.scheduler.workers.hooks import ANNOTATIONS
from cronchain.scheduler.workers.patches import release_fired_eta_entries

_settings = Settings.from_env()
release_fired_eta_entries()  # every tick is held for its ETA

broker_url = _settings.broker_url
broker_connection_retry_on_startup = True
# On RabbitMQ (Redis ignores it), the broker drops a connection its worker no longer
# reads after two missed heartbeats, and a worker notices a dead connection as soon:
# 20-30 s, where with Celery's default (120 s; RabbitMQ's 60 s, the lower, is agreed)
# it takes some two minutes.
broker_heartbeat = 10
if _settings.embedded_broker:
    from cronchain.scheduler.workers.fsbroker import ALIAS

    # kombu's filesystem transport, made safe across processes; a host it ignores, named
    # so that kombu does not warn at each connection that none was given.
    broker_url = f"{ALIAS}://localhost/"
    _queue_folder = _settings.broker_folder / "queue"
    for _folder in (_queue_folder, _settings.broker_folder / "control"):
        _folder.mkdir(parents=True, exist_ok=True)
    broker_transport_options = {
        "data_folder_in": str(_queue_folder),
        "data_folder_out": str(_queue_folder),
        "control_folder": str(_settings.broker_folder / "control"),
        "polling_interval": 0.05,
    }
else:
    from cronchain.scheduler.workers.patches import guard_redis_channel, reuse_redis_clients

    guard_redis_channel()
    reuse_redis_clients()
    # ETAs are capped by scheduler.settings.ETA_HORIZON, far below this timeout, so a
    # waiting ETA message is never redelivered as if its worker had died. Priorities keep
    # kombu's default steps (0, 3, 6, 9): users' own workers, which take celery jobs'
    # tasks, read those lists and no others.
    broker_transport_options = {"visibility_timeout": VISIBILITY_TIMEOUT.total_seconds()}

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
task_ignore_result = True
task_acks_late = True  # but not a work-path run's (tasks/chain.py: RUN)
# After a reconnection Celery lowers the prefetch count, and raises it again from the
# callback of each acknowledgement: on the threads pool (the work path), in the pool's
# thread, with a basic.qos that reads the connection the main thread reads. The two
# readers split frames between them and the worker stops taking messages (found by the
# fault suite on RabbitMQ). Without the reduction the prefetch count stays as set.
worker_enable_prefetch_count_reduction = False
task_reject_on_worker_lost = False  # the watchdog repairs; no redelivery loops
task_default_queue = _settings.queue
worker_prefetch_multiplier = 8
# Celery's ETA timer sleeps up to this long between checks (default 1 s): with the
# default a tick runs up to a second after its slot.
worker_timer_precision = 0.05
# Task events cost a Redis publish each, several per task: they stay off until a monitor
# asks for them (Flower broadcasts enable_events when it starts).
worker_send_task_events = False
# Every task claims its attempt before it runs if cronchain sent it (scheduler.workers.hooks).
task_annotations = [ANNOTATIONS]
timezone = "UTC"
enable_utc = True
imports = _settings.imports

beat_schedule_filename = str(_settings.home / "celerybeat-schedule")
beat_schedule = {
    "cronchain-watchdog": {
        "task": "cronchain.watchdog",
        "schedule": _settings.watchdog_interval,
        # A run that waited longer than an interval only sends parked ticks: its
        # repairs are the next run's (scheduler.maintenance.watchdog.pass_for). The
        # price: a chain lost during such a backlog waits for it to drain.
        "options": {"expires": WATCHDOG_LIFETIME},
    },
}
if _settings.jobs_dir is not None or _settings.apps:
    # The folder and the apps' @periodic tasks are the source of truth: each interval,
    # and as beat starts (tasks.chain), their jobs are applied.
    beat_schedule["cronchain-reconcile"] = {
        "task": "cronchain.reconcile",
        "schedule": _settings.reconcile_interval,
        "options": {"expires": _settings.reconcile_interval},
    }
