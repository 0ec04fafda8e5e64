"""What a step's messages become on the way out: pure, with a recording port."""

from __future__ import annotations

from cronchain.scheduler.core.effects import SendRun, send
from cronchain.scheduler.invokers import Call
from cronchain.scheduler.invokers.call import message_priority
from cronchain.scheduler.workers.port import CeleryPort
from tests.support.engine import RecordingPort, SendingApp


def call(invocation_id: int, priority: int) -> Call:
    return Call(invocation_id, 1, "p/j", None, {}, priority=priority)


def test_runs_go_in_batches_of_one_priority_the_highest_first():
    port = RecordingPort()
    priorities = [5, 9, 1, 5, 9, 5, 1]
    send(port, [SendRun(call(i, p)) for i, p in enumerate(priorities)], batch=2)
    # Chunks of two by priority, [9, 9] [5, 5] [5, 1] [1]; the mixed one goes as two.
    assert [[c.priority for c in b] for b in port.run_batches] == [[9, 9], [5, 5]]
    sent = [c.invocation_id for c in port.runs]
    assert sent == [1, 4, 0, 3, 5, 2, 6]  # by priority, each priority in its order


def test_a_jobs_priority_as_each_broker_reads_it():
    for redis in ("redis://h:6379/0", "rediss://h/0", "sentinel://h:26379"):
        assert [message_priority(p, redis) for p in (9, 5, 0)] == [0, 4, 9]  # 0 first
    for amqp in ("amqp://u:p@h:5672/v", "pyamqp://h//", "amqps://h//"):
        assert [message_priority(p, amqp) for p in (9, 5, 0)] == [9, 5, 0]  # 9 first


def test_a_celery_jobs_priority_unless_its_task_options_set_the_brokers():
    from cronchain.scheduler.invokers.celery import send_task

    options = {"task": "t", "args": [], "kwargs": {}, "queue": "q"}
    for broker, expected in (("redis://h/0", [1, None, 200]), ("amqp://h//", [8, None, 200])):
        app = SendingApp(broker)
        for priority, own in ((8, {}), (5, {}), (8, {"priority": 200})):
            job = Call(1, 1, "p/j", None, options | own, kind="celery", priority=priority)
            send_task(app, job)  # type: ignore[arg-type]
        assert [s.get("priority") for _, s in app.sent] == expected, broker


def test_the_work_paths_messages_carry_the_brokers_priority():
    for broker, expected in (("redis://h/0", 1), ("amqp://h//", 8)):
        app = SendingApp(broker)
        port = CeleryPort(app, "cronchain", "cronchain.work")  # type: ignore[arg-type]
        port.run(Call(1, 1, "p/j", None, {}, kind="noop", priority=8))
        port.run_batch([Call(2, 1, "p/j", None, {}, kind="noop", priority=8)])
        assert [s["priority"] for _, s in app.sent] == [expected, expected], broker
