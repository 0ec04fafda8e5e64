"""The Celery app: ``celery -A cronchain.tasks worker``, ``celery -A cronchain.tasks beat``,
``celery -A cronchain.tasks flower``. Importing the package registers cronchain's tasks."""

from cronchain.tasks import chain  # noqa: F401  (registers the tasks)
from cronchain.tasks.app import app

__all__ = ["app"]
