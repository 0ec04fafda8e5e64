"""The http kind against real local servers: the SSRF guard (tried with the usual
tricks), redirects, accepted codes, the request's deadline and secret redaction."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cronchain.scheduler.invokers import Call
from cronchain.scheduler.invokers.http import HttpInvoker, origin
from cronchain.scheduler.invokers.netguard import parse_allow
from cronchain.scheduler.spec.jobspec import JobSpec

SECRET = "s3cr3t-Tok/en+="
LOOPBACK = parse_allow("127.0.0.1/32")


class Server:
    """Answers every request from ``routes`` (path -> (status, headers, body)); records
    each request's path and headers.

    A path in ``slow`` (path -> (seconds, count)) has the last ``count`` bytes of its
    answer, or all of it when ``count`` is None, written one byte per ``seconds``: a
    server that trickles, each byte well within any per-read timeout. ``cut`` is set
    when the client closes such a connection before the answer is written whole."""

    def __init__(self, host: str = "127.0.0.1"):
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.fields: list[list[tuple[str, str]]] = []  # each request's headers, every copy
        self.routes: dict[str, tuple[int, dict[str, str], str]] = {}
        self.slow: dict[str, tuple[float, int | None]] = {}
        self.cut = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                server.requests.append((self.path, dict(self.headers)))
                server.fields.append(list(self.headers.items()))
                path = self.path.split("?")[0]
                status, headers, body = server.routes.get(path, (200, {}, "ok"))
                if status == 0:  # hang
                    time.sleep(5)
                    return
                body = body.replace("{auth}", self.headers.get("Authorization", ""))
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body.encode())}"]
                head += [f"{name}: {value}" for name, value in headers.items()]
                answer = ("\r\n".join(head) + "\r\n\r\n" + body).encode()
                seconds, count = server.slow.get(path, (0, 0))
                at_once = len(answer) - (len(answer) if count is None else count)
                try:
                    self.wfile.write(answer[:at_once])
                    for i in range(at_once, len(answer)):
                        time.sleep(seconds)
                        self.wfile.write(answer[i : i + 1])
                except OSError:
                    server.cut.set()

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
    return Call(7, 1, "p/h", None, dict(spec.options), trigger_id="t1")


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
    assert headers["Idempotency-Key"] == "cronchain/p/h/trigger-t1"
    assert (headers["X-Cronchain-Invocation"], headers["X-Cronchain-Attempt"]) == ("7", "1")


def test_the_idempotency_key_names_the_run_not_an_id_a_database_may_hand_out_again(
    server: Server,
):
    """A database that lost its last transactions (an asynchronous replica promoted, a
    backup restored) hands their invocation ids out again: a key made of the id names two
    runs, and a receiver that honours it drops the second as a retry of the first. The key
    is the run's job and slot (or trigger), the same when that slot is fired again."""
    slot = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
    options = dict(call(f"http://127.0.0.1:{server.port}/x").options)
    for sent in (
        Call(7, 1, "p/a", slot, options),
        Call(7, 1, "p/b", slot, options),  # id 7 handed out again, to another job
        Call(9, 2, "p/a", slot, options),  # p/a's slot fired again, under another id
        Call(7, 1, "p/a", None, options, trigger_id="5f0c"),
    ):
        HttpInvoker(LOOPBACK).invoke(sent)
    assert Call(7, 1, "p/a", slot.astimezone(timezone(timedelta(hours=2))), options).key == (
        "cronchain/p/a/2026-11-28T03:00:00Z"  # an instant, in UTC whatever its zone
    )
    half = Call(7, 1, "p/a", slot + timedelta(milliseconds=500), options).key
    assert half == "cronchain/p/a/2026-11-28T03:00:00.500000Z"  # a slot under a second
    assert [headers["Idempotency-Key"] for _, headers in server.requests] == [
        "cronchain/p/a/2026-11-28T03:00:00Z",
        "cronchain/p/b/2026-11-28T03:00:00Z",
        "cronchain/p/a/2026-11-28T03:00:00Z",
        "cronchain/p/a/trigger-5f0c",
    ]


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


def test_max_redirects_counts_past_urllibs_own_limit_of_ten(server: Server):
    for hop in range(12):
        server.routes[f"/hop{hop}"] = (302, {"Location": f"/hop{hop + 1}"}, "")
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/hop0", max_redirects=12)
    )
    assert outcome is not None and outcome.status == "SUCCEEDED", outcome
    assert len(server.requests) == 13


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


# A trickling server is cut at the deadline. The bound is generous for a loaded machine;
# a timeout per socket read instead (each byte comes well within it) takes 30 s and more.
DEADLINE_BOUND = 5


@pytest.mark.parametrize("phase", ["head", "body"])
def test_a_trickling_answer_is_cut_at_the_deadline(server: Server, phase: str):
    server.routes["/drip"] = (200, {}, "x" * 100)
    server.slow["/drip"] = (0.3, None if phase == "head" else 100)
    started = time.monotonic()
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/drip", timeout="1s")
    )
    took = time.monotonic() - started
    assert outcome is not None and outcome.reason == "timeout", outcome
    assert 1 <= took < DEADLINE_BOUND
    assert "1s" in (outcome.error or "")
    assert server.cut.wait(DEADLINE_BOUND)  # the connection was closed, not left to drip


def test_the_deadline_covers_every_redirect(server: Server):
    # Each hop answers within 0.6 s, under the timeout, but together they take 9 s.
    for hop in range(15):
        server.routes[f"/hop{hop}"] = (302, {"Location": f"/hop{hop + 1}"}, "")
        server.slow[f"/hop{hop}"] = (0.3, 2)
    started = time.monotonic()
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/hop0", timeout="1s", max_redirects=20)
    )
    took = time.monotonic() - started
    assert outcome is not None and outcome.reason == "timeout", outcome
    assert 1 <= took < DEADLINE_BOUND
    assert len(server.requests) < 5


def test_a_trickle_after_a_redirect_is_cut_at_the_deadline(server: Server):
    server.routes["/first"] = (302, {"Location": "/drip"}, "")
    server.slow["/first"] = (0.3, 2)
    server.routes["/drip"] = (200, {}, "x" * 100)
    server.slow["/drip"] = (0.3, None)
    started = time.monotonic()
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/first", timeout="1s")
    )
    took = time.monotonic() - started
    assert outcome is not None and outcome.reason == "timeout", outcome
    assert 1 <= took < DEADLINE_BOUND
    assert [path for path, _ in server.requests] == ["/first", "/drip"]


def test_the_job_timeout_caps_the_deadline(server: Server):
    server.routes["/drip"] = (200, {}, "x" * 100)
    server.slow["/drip"] = (0.3, None)
    c = call(f"http://127.0.0.1:{server.port}/drip", timeout="30s")
    started = time.monotonic()
    outcome = HttpInvoker(LOOPBACK).invoke(replace(c, timeout=timedelta(seconds=1)))
    assert outcome is not None and outcome.reason == "timeout", outcome
    assert time.monotonic() - started < DEADLINE_BOUND


def test_a_slow_answer_within_the_deadline_succeeds(server: Server):
    server.routes["/slow"] = (200, {}, "done")
    server.slow["/slow"] = (0.2, 4)
    outcome = HttpInvoker(LOOPBACK).invoke(
        call(f"http://127.0.0.1:{server.port}/slow", timeout="5s")
    )
    assert outcome is not None and outcome.status == "SUCCEEDED", outcome
    assert outcome.log == ("answered 200: done",)


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


CREDENTIALS = {"Authorization": "Bearer plain", "Cookie": "sid=1", "Proxy-Authorization": "p"}


def test_credentials_do_not_follow_a_redirect_to_another_origin(server: Server):
    other = Server("127.0.0.1")
    try:
        server.routes["/away"] = (302, {"Location": f"http://127.0.0.1:{other.port}/"}, "")
        c = call(f"http://127.0.0.1:{server.port}/away", headers={**CREDENTIALS, "X-Plain": "1"})
        outcome = HttpInvoker(LOOPBACK).invoke(c)
        assert outcome is not None and outcome.status == "SUCCEEDED", outcome
        [(_, first)] = server.requests
        assert {name: first[name] for name in CREDENTIALS} == CREDENTIALS
        [(_, headers)] = other.requests
        assert not set(CREDENTIALS) & set(headers) and headers["X-Plain"] == "1"
    finally:
        other.close()


def test_credentials_follow_a_redirect_within_the_origin(server: Server):
    server.routes["/here"] = (302, {"Location": f"http://127.0.0.1:{server.port}/there"}, "")
    c = call(f"http://127.0.0.1:{server.port}/here", headers={**CREDENTIALS, "X-Plain": "1"})
    outcome = HttpInvoker(LOOPBACK).invoke(c)
    assert outcome is not None and outcome.status == "SUCCEEDED", outcome
    assert [path for path, _ in server.requests] == ["/here", "/there"]
    _, headers = server.requests[1]
    assert {name: headers[name] for name in CREDENTIALS} == CREDENTIALS


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("http://Example.org/x", "http://example.org:80/y", True),
        ("https://example.org/", "https://example.org:443/", True),
        ("http://example.org/", "https://example.org/", False),
        ("http://example.org/", "http://example.org:8080/", False),
        ("http://example.org/", "http://www.example.org/", False),
    ],
)
def test_an_origin_is_scheme_host_and_port(a: str, b: str, same: bool):
    assert (origin(a) == origin(b)) is same


def test_a_large_body_is_truncated_in_the_log(server: Server):
    server.routes["/big"] = (200, {}, "x" * 200_000)
    outcome = HttpInvoker(LOOPBACK).invoke(call(f"http://127.0.0.1:{server.port}/big"))
    assert outcome is not None and len(outcome.log[0]) < 1200


def test_an_address_that_never_answers_leaves_time_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
):
    """A name whose first address drops every connection (a broken route listed first)
    still reaches its second within the deadline: each address gets its share."""
    good = Server("127.0.0.1")
    good.routes["/"] = (200, {}, "ok")
    black = socket.socket()
    black.bind(("127.0.0.2", good.port))
    black.listen(0)
    filling = []
    for _ in range(3):  # fill the accept queue: later connections are never answered
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.2", good.port))
        filling.append(c)
    real = socket.getaddrinfo

    def two_addresses(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "twice.test":
            return real(host, port, *args, **kwargs)
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
            for address in ("127.0.0.2", "127.0.0.1")
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    try:
        started = time.monotonic()
        outcome = HttpInvoker(parse_allow("127.0.0.0/8")).invoke(
            call(f"http://twice.test:{good.port}/", timeout="2s")
        )
        assert outcome.status == "SUCCEEDED", outcome
        assert time.monotonic() - started < DEADLINE_BOUND
    finally:
        for c in [*filling, black]:
            c.close()
        good.close()


def test_a_post_without_a_body_says_its_length(server: Server):
    """As http.client did: front ends answer 411 to a POST of no stated length."""
    url = f"http://127.0.0.1:{server.port}/hook"
    outcome = HttpInvoker(LOOPBACK).invoke(call(url, method="POST"))
    assert outcome.status == "SUCCEEDED", outcome
    [(_, headers)] = server.requests
    assert headers["Content-Length"] == "0"


def test_cronchains_own_headers_replace_the_jobs_in_any_case(server: Server):
    c = call(
        f"http://127.0.0.1:{server.port}/x",
        headers={"idempotency-key": "spoofed", "X-CRONCHAIN-ATTEMPT": "99"},
    )
    assert HttpInvoker(LOOPBACK).invoke(c).status == "SUCCEEDED"
    [fields] = server.fields
    sent = [(name.lower(), value) for name, value in fields]
    assert [v for n, v in sent if n == "idempotency-key"] == [c.key]
    assert [v for n, v in sent if n == "x-cronchain-attempt"] == ["1"]


def test_an_international_name_is_sent_in_idna(server: Server, monkeypatch: pytest.MonkeyPatch):
    real = socket.getaddrinfo

    def resolved(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "bücher.test":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolved)
    outcome = HttpInvoker(LOOPBACK).invoke(call(f"http://bücher.test:{server.port}/x"))
    assert outcome.status == "SUCCEEDED", outcome
    [(_, headers)] = server.requests
    assert headers["Host"] == f"xn--bcher-kva.test:{server.port}"


def test_a_redirect_not_followed_is_the_answer_with_its_body(server: Server):
    """A POST is not sent on after a 307 (as urllib): the 307 is judged, and its body
    logged, as any answer's is."""
    server.routes["/moved"] = (307, {"Location": "/elsewhere"}, "moved for now")
    url = f"http://127.0.0.1:{server.port}/moved"
    outcome = HttpInvoker(LOOPBACK).invoke(call(url, method="POST", body="{}"))
    assert (outcome.status, outcome.reason) == ("FAILED", "status")
    assert outcome.log == ("answered 307: moved for now",)
    assert [path for path, _ in server.requests] == ["/moved"]


@pytest.mark.parametrize(
    "line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 20 OK", b"ICY 200 OK", b"HTTP/1.1 two OK"]
)
def test_a_status_line_that_is_none_fails_the_call(line: bytes):
    """Read as http.client read it: a status of exactly three digits."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(line + b"\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        outcome = HttpInvoker(LOOPBACK).invoke(call(url))
    finally:
        listener.close()
    assert (outcome.status, outcome.reason) == ("FAILED", "launch"), outcome
    assert "not an HTTP answer" in (outcome.error or "")
