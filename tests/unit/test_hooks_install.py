"""``scheduler.install(app)`` on a user's app must not load its configuration early:
that sent ``on_after_configure`` before the module connected its handlers, and the
``add_periodic_task`` entries they add vanished (from beat and from ``import-beat``)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from cronchain.scheduler.workers.hooks import ANNOTATIONS, install


def test_install_waits_for_the_configuration_and_keeps_later_handlers():
    app = Celery("user", set_as_current=False)
    install(app)
    assert not app.configured

    @app.on_after_configure.connect
    def schedule(sender: Celery, **_: Any) -> None:
        sender.add_periodic_task(10.0, sender.signature("user.ping"), name="ping")

    assert set(app.conf.beat_schedule) == {"ping"}
    assert app.conf.task_annotations[0] == ANNOTATIONS

    @app.task(name="user.ping")
    def ping() -> None: ...

    app.finalize()
    assert ping.before_start.__name__ == "before_start_fenced"


def test_install_on_a_configured_app_annotates_it_at_once_and_only_once():
    app = Celery("user", set_as_current=False)
    app.conf.task_annotations = {"user.ping": {"rate_limit": "1/s"}}
    install(app)
    install(app)
    assert app.conf.task_annotations == [ANNOTATIONS, {"user.ping": {"rate_limit": "1/s"}}]
