"""What a step's messages become on the way out: pure, with a recording port."""

from __future__ import annotations

from cronchain.scheduler.core.effects import SendRun, send
from cronchain.scheduler.invokers import Call
from cronchain.scheduler.invokers.call import redis_priority
from tests.support.engine import RecordingPort


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


def test_a_jobs_priority_as_redis_reads_it():
    assert [redis_priority(p) for p in (9, 5, 0)] == [0, 4, 9]  # Redis serves 0 first


def test_a_celery_jobs_priority_unless_its_task_options_set_the_brokers():
    from cronchain.scheduler.invokers.celery import send_task

    sent: list[dict[str, object]] = []

    class App:
        def send_task(self, name: str, **options: object) -> None:
            sent.append(options)

    options = {"task": "t", "args": [], "kwargs": {}, "queue": "q"}
    for priority, own in ((8, {}), (5, {}), (8, {"priority": 200})):
        job = Call(1, 1, "p/j", None, options | own, kind="celery", priority=priority)
        send_task(App(), job)  # type: ignore[arg-type]
    assert [s.get("priority") for s in sent] == [1, None, 200]
