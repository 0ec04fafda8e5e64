"""Tasks for the ``celery`` job kind's end-to-end test (imported via CRONCHAIN_IMPORTS)."""

from tasks import app


@app.task(name="sample.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="sample.boom")
def boom() -> None:
    raise RuntimeError("boom")
