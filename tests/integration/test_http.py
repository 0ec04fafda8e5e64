"""The http kind against real local servers: the SSRF guard (tried with the usual
tricks), redirects, accepted codes, timeouts and secret redaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler.invokers import Call
from scheduler.invokers.http import HttpInvoker
from scheduler.invokers.netguard import parse_allow
from scheduler.spec import JobSpec

SECRET = "s3cr3t-Tok/en+="
LOOPBACK = parse_allow("127.0.0.1/32")


class Server:
    """Answers every request from ``routes`` (path -> (status, headers, body)); records
    each request's path and headers."""

    def __init__(self, host: str = "127.0.0.1"):
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.routes: dict[str, tuple[int, dict[str, str], str]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                server.requests.append((self.path, dict(self.headers)))
                status, headers, body = server.routes.get(self.path.split("?")[0], (200, {}, "ok"))
                if status == 0:  # hang
                    time.sleep(5)
                    return
                body = body.replace("{auth}", self.headers.get("Authorization", ""))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST = handle_one  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server("0.0.0.0")  # reachable on every loopback address, so a leak would show
    yield s
    s.close()


def call(url: str, **options: Any) -> Call:
    spec = JobSpec("p", "h", "triggered", kind="http", options={"url": url, **options})
    return Call(7, 1, "p/h", None, dict(spec.options))


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "127.1",
        "2130706433",  # 127.0.0.1 as one integer
        "0x7f000001",
        "0177.0.0.1",  # octal
        "0.0.0.0",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "127.0.0.2",
    ],
)
def test_loopback_in_any_spelling_is_refused(server: Server, host: str):
    outcome = HttpInvoker().invoke(call(f"http://{host}:{server.port}/x"))
    assert outcome is not None and outcome.reason == "refused", outcome
    assert server.requests == []


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/"])
def test_metadata_and_private_addresses_are_refused_without_a_connection(url: str):
    started = time.monotonic()
    outcome = HttpInvoker().invoke(call(url, timeout="5s"))
    assert outcome is not None and outcome.reason == "refused"
    assert time.monotonic() - started < 1  # refused before connecting, not timed out


def test_allowed_addresses_are_called_with_an_idempotency_key(server: Server):
    outcome = HttpInvoker(LOOPBACK).invoke(call(f"http://127.0.0.1:{server.port}/x"))
    assert outcome is not None and outcome.status == "SUCCEEDED"
    [(_, headers)] = server.requests
    assert headers["Idempotency-Key"] == "cronchain-7"
    assert (headers["X-Cronchain-Invocation"], headers["X-Cronchain-Attempt"]) == ("7", "1")


def test_a_redirect_to_a_refused_address_is_not_followed(server: Server):
    server.routes["/go"] = (302, {"Location": f"http://127.0.0.2:{server.port}/inside"}, "")
    outcome = HttpInvoker(LOOPBACK).invoke(call(f"http://127.0.0.1:{server.port}/go"))
    assert outcome is not None and outcome.reason == "refused"
    assert [path for path, _ in server.requests] == ["/go"]


def test_redirects_are_bounded(server: Server):
    server.routes["/loop"] = (302, {"Location": "/loop"}, "")
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/loop", max_redirects=2)
    )
    assert outcome is not None and outcome.status == "FAILED"
    assert len(server.requests) == 3  # the first request and two redirects


def test_max_redirects_zero_judges_the_redirect_itself(server: Server):
    server.routes["/moved"] = (301, {"Location": "/elsewhere"}, "")
    url = f"http://127.0.0.1:{server.port}/moved"
    outcome = HttpInvoker(LOOPBACK).invoke(call(url, max_redirects=0, accept=["3xx"]))
    assert outcome is not None and outcome.status == "SUCCEEDED"
    assert len(server.requests) == 1


def test_accepted_status_codes(server: Server):
    server.routes["/busy"] = (503, {}, "try later")
    url = f"http://127.0.0.1:{server.port}/busy"
    failed = HttpInvoker(LOOPBACK).invoke(call(url))
    assert failed is not None and failed.reason == "status" and "503" in (failed.error or "")
    assert "try later" in failed.log[0]
    ok = HttpInvoker(LOOPBACK).invoke(call(url, accept=[503]))
    assert ok is not None and ok.status == "SUCCEEDED"


def test_a_hanging_endpoint_hits_the_timeout(server: Server):
    server.routes["/hang"] = (0, {}, "")
    started = time.monotonic()
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/hang", timeout="1s")
    )
    assert outcome is not None and outcome.reason == "timeout"
    assert time.monotonic() - started < 3


def test_a_secret_echoed_back_never_reaches_history(server: Server):
    server.routes["/echo"] = (500, {"Location": "x"}, "you sent {auth} and {auth}")
    url = f"http://127.0.0.1:{server.port}/echo?k={SECRET}"
    c = call(url, headers={"Authorization": {"secret": SECRET}})
    outcome = HttpInvoker(LOOPBACK).invoke(c)
    assert outcome is not None and outcome.status == "FAILED"
    [(_, headers)] = server.requests
    assert headers["Authorization"] == SECRET  # it was sent...
    written = " ".join([outcome.error or "", *outcome.log])
    assert SECRET not in written and "s3cr3t" not in written  # ...and never written
    assert "[secret]" in written


def test_an_env_secret_is_read_at_call_time_and_redacted(
    server: Server, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HOOK_TOKEN", SECRET)
    server.routes["/echo"] = (200, {}, "{auth}")
    c = call(
        f"http://127.0.0.1:{server.port}/echo", headers={"Authorization": {"env": "HOOK_TOKEN"}}
    )
    outcome = HttpInvoker(LOOPBACK).invoke(c)
    assert outcome is not None and outcome.status == "SUCCEEDED"
    assert SECRET not in " ".join(outcome.log)
    assert "env" in c.options["headers"]["Authorization"]  # the spec holds only the name


def test_secret_headers_do_not_follow_a_redirect_to_another_origin(server: Server):
    other = Server("127.0.0.1")
    try:
        server.routes["/away"] = (302, {"Location": f"http://127.0.0.1:{other.port}/"}, "")
        c = call(
            f"http://127.0.0.1:{server.port}/away",
            headers={"Authorization": {"secret": SECRET}, "X-Plain": "1"},
        )
        outcome = HttpInvoker(LOOPBACK).invoke(c)
        assert outcome is not None and outcome.status == "SUCCEEDED"
        [(_, headers)] = other.requests
        assert "Authorization" not in headers and headers["X-Plain"] == "1"
    finally:
        other.close()


def test_a_large_body_is_truncated_in_the_log(server: Server):
    server.routes["/big"] = (200, {}, "x" * 200_000)
    outcome = HttpInvoker(LOOPBACK).invoke(call(f"http://127.0.0.1:{server.port}/big"))
    assert outcome is not None and len(outcome.log[0]) < 1200
