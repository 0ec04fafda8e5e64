"""Declaring jobs: ``apply``, the jobs folder, ``@periodic``, a user's Celery app, and
``import-beat``."""
