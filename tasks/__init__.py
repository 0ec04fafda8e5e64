"""The Celery app: ``celery -A tasks worker``, ``celery -A tasks beat``,
``celery -A tasks flower``. Importing the package registers cronchain's tasks."""

from tasks import chain  # noqa: F401  (registers the tasks)
from tasks.app import app

__all__ = ["app"]
