"""The Celery app, configured from ``celeryconfig`` (the environment), logging as
``scheduler.workers.logs`` says."""

import logging

from celery import Celery

from cronchain.scheduler.workers import events, logs

# transitions logs every callback at INFO: one line per state change drowns the worker log.
logging.getLogger("transitions").setLevel(logging.WARNING)
logs.install()
events.install()

app = Celery("cronchain")
app.config_from_object("cronchain.celeryconfig")
