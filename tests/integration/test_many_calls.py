"""The work path holds a herd's ``http`` calls at once, however few its threads: each
call waits on the process's event loop, not in a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import sqlalchemy

from cronchain.scheduler.workers import work
from tests.e2e.harness import Endpoint
from tests.support.deliver import sent
from tests.support.engine import Clock, http_engine
from tests.support.jobs import apply, make
from tests.support.rows import rows

pytestmark = pytest.mark.postgres
CALLS = 60  # in one batch (a tick batch holds 100), with two threads to make them
PATIENCE = 30  # s the endpoint waits for every call before it gives up on them


@contextmanager
def all_at_once(expected: int) -> Iterator[tuple[str, list[int]]]:
    """An endpoint that answers no call until ``expected`` are waiting for it together,
    then 200 to each (503 to each if they never are, so a test fails, not hangs); the
    list holds the most calls it had in hand at once."""
    together = threading.Barrier(expected)
    most = [0]
    lock = threading.Lock()
    waiting = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            with lock:
                waiting[0] += 1
                most[0] = max(most[0], waiting[0])
            try:
                together.wait(PATIENCE)
                status = 200
            except threading.BrokenBarrierError:
                status = 503
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = Endpoint(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", most
    finally:
        together.abort()
        server.shutdown()
        server.server_close()


def test_a_batch_holds_all_its_http_calls_at_once_past_its_threads(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = http_engine(db, clock)
    with all_at_once(CALLS) as (url, most):
        apply(engine, *(make(name=f"h{i}", kind="http", url=url) for i in range(CALLS)))
        clock.advance(10)
        engine.tick_many(sent(port), start_here=True)
        [batch] = port.run_batches
        attempts = [(call.invocation_id, call.attempt, call.job_id) for call in batch]
        outcomes = work.execute_batch(engine, attempts, "work@test", threads=2)
    assert most[0] == CALLS
    assert [o.status for o in outcomes] == ["SUCCEEDED"] * CALLS
    assert {r["status"] for r in rows(engine)} == {"SUCCEEDED"}
