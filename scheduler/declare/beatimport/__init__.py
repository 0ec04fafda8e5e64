"""From Celery beat to cronchain: ``cronchain import-beat`` reads a Celery app's beat
schedule (in a process of its own, :mod:`scheduler.declare.app_process`) or django-celery-beat's
tables (:mod:`.djangobeat`), converts each entry (:mod:`.entries`, :mod:`.schedules`)
and writes a job file to review (:mod:`.jobfile`)."""
