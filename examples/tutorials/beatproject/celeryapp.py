"""A Celery project scheduled by Celery beat: the starting point of the tutorial
"From Celery beat to cronchain" (docs/tutorials/import-beat.md).

Run as it was, with beat: ``celery -A celeryapp worker --beat -Q celery,reports``.
Its schedule as a job file: ``cronchain import-beat celeryapp:app -o shop.yaml``.
The ``warm cache`` entry has ``relative=True`` on purpose: step 3 of the tutorial.
"""

import logging
import os

from celery import Celery
from celery.schedules import crontab

import cronchain.scheduler

log = logging.getLogger(__name__)

app = Celery("shop", broker=os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0"))
app.conf.timezone = "Europe/Berlin"
app.conf.task_routes = {"shop.nightly_report": {"queue": "reports"}}
# The workers claim, renew and report cronchain's runs (step 5 of the tutorial).
cronchain.scheduler.install(app)

app.conf.beat_schedule = {
    "ping": {"task": "shop.ping", "schedule": 10.0},
    "nightly report": {
        "task": "shop.nightly_report",
        "schedule": crontab(minute=0, hour=3, day_of_week="mon-fri"),
        "options": {"expires": 600},
    },
    "purge carts": {
        "task": "shop.purge_carts",
        "schedule": crontab(minute="*/15"),
        "kwargs": {"older_than_days": 30},
    },
    "warm cache": {"task": "shop.warm_cache", "schedule": 300.0, "relative": True},
}


@app.on_after_configure.connect
def more_entries(sender, **_):
    sender.add_periodic_task(crontab(minute=30, hour=2), rotate_keys.s(), name="rotate keys")


@app.task(name="shop.ping")
def ping():
    log.info("pong")


@app.task(name="shop.nightly_report")
def nightly_report():
    log.info("report written")


@app.task(name="shop.purge_carts")
def purge_carts(older_than_days):
    log.info("carts older than %s days purged", older_than_days)


@app.task(name="shop.warm_cache")
def warm_cache():
    log.info("cache warm")


@app.task(name="shop.rotate_keys")
def rotate_keys():
    log.info("keys rotated")
