"""The Celery app: ``celery -A tasks worker``, ``celery -A tasks beat``,
``celery -A tasks flower``. Settings come from ``celeryconfig`` (the environment)."""

import logging

from celery import Celery

# transitions logs every callback at INFO: one line per state change drowns the worker log.
logging.getLogger("transitions").setLevel(logging.WARNING)

app = Celery("cronchain")
app.config_from_object("celeryconfig")

from tasks import chain  # noqa: E402,F401  (registers the tasks)

__all__ = ["app"]
