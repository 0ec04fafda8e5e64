"""The Celery app, configured from ``celeryconfig`` (the environment), logging as
``scheduler.workers.logs`` says."""

from celery import Celery

from cronchain.scheduler.workers import clocks, events, logs

logs.install()
events.install()

app = clocks.use_database_clock(Celery("cronchain", task_cls=clocks.Task))
app.config_from_object("cronchain.celeryconfig")
