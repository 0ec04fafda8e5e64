"""The Celery app, configured from ``celeryconfig`` (the environment)."""

import logging

from celery import Celery

# transitions logs every callback at INFO: one line per state change drowns the worker log.
logging.getLogger("transitions").setLevel(logging.WARNING)

app = Celery("cronchain")
app.config_from_object("cronchain.celeryconfig")
