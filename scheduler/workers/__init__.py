"""The worker side: what runs in Celery worker processes (the work path, the hooks a
``celery`` job's worker installs, the runtime each process makes, patches to Celery)."""
