"""The project's tasks: cronchain sends them by name, as Celery beat would."""

from proj.celery import app


@app.task
def send_report(kind: str) -> str:
    return f"{kind} report sent"
