"""From Celery beat to cronchain: ``cronchain import-beat`` reads a Celery app's beat
schedule (:mod:`.celeryapp`) or django-celery-beat's tables, converts each entry
(:mod:`.entries`, :mod:`.schedules`) and writes a job file to review (:mod:`.jobfile`)."""
