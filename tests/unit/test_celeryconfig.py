"""What celeryconfig promises the watchdog."""

from __future__ import annotations

import importlib

from cronchain.scheduler.settings import WATCHDOG_LIFETIME


def test_watchdog_runs_know_how_long_they_waited_in_the_queue() -> None:
    """The expiry is how a run knows how long it waited
    (``scheduler.maintenance.watchdog.waited``), and one that waited longer than an
    interval repairs nothing (``pass_for``). Without that, an overloaded worker's
    watchdog took late ticks for lost ones and resent them with new nonces:
    bench.fire_rate at 10k jobs every 50 s fell to 131 fires/s at 5.2 transactions per
    fire; runs of that load with it kept 2.0."""
    config = importlib.import_module("cronchain.celeryconfig")
    entry = config.beat_schedule["cronchain-watchdog"]
    assert entry["task"] == "cronchain.watchdog"
    assert entry["options"]["expires"] == WATCHDOG_LIFETIME == 3600


def test_the_workers_free_the_tasks_held_for_their_eta() -> None:
    """Every tick is held for its ETA (scheduler.workers.patches)."""
    from celery.worker.consumer.consumer import Consumer

    importlib.import_module("cronchain.celeryconfig")
    assert Consumer.apply_eta_task.releasing  # type: ignore[attr-defined]


def test_a_run_s_message_is_acknowledged_as_it_begins_and_the_others_once_done() -> None:
    """A run may outlast a broker's patience (RabbitMQ's consumer_timeout closes the
    channel of a worker that holds a delivery too long, and Celery's worker exits): its
    claim, not its message, carries it. The other tasks end quickly, and their message
    comes back if their worker dies."""
    from cronchain.tasks.app import app

    importlib.import_module("cronchain.tasks.chain")
    late = {
        name: task.acks_late for name, task in app.tasks.items() if name.startswith("cronchain.")
    }
    assert late.pop("cronchain.run") is False and late.pop("cronchain.run_batch") is False
    assert late and all(late.values()), late
    assert importlib.import_module("cronchain.celeryconfig").broker_heartbeat == 10


def test_no_pool_thread_raises_the_prefetch_count_after_a_reconnection() -> None:
    """Celery would raise it from the callback of each acknowledgement: on the work
    path's threads, a read of the connection the main thread reads (the RabbitMQ faults
    watch for it: tests.faults.amqp_watch)."""
    config = importlib.import_module("cronchain.celeryconfig")
    assert config.worker_enable_prefetch_count_reduction is False
