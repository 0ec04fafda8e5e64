"""An ordinary Celery project's app, with the one line cronchain asks of it."""

import os

from celery import Celery

from cronchain.scheduler import install

app = Celery(
    "proj",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0"),
    include=["proj.tasks"],
)
install(app)  # this app's workers claim cronchain's runs and report how they ended
