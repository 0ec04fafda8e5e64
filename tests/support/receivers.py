"""Real local receivers for alerts: a webhook (an HTTP server) and an SMTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.services import free_port, serving


@dataclass
class Webhook:
    """Every POST it took (headers and JSON body). ``answers`` are the statuses of the
    next requests (then 200); ``hold`` makes the next request wait until it is set."""

    url: str = ""
    posts: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    hold: threading.Event | None = None
    held: threading.Event = field(default_factory=threading.Event)

    def keys(self) -> list[str]:
        return [headers["Idempotency-Key"] for headers, _ in self.posts]


@contextmanager
def webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hook.posts.append((dict(self.headers), body))
            if hook.hold is not None:
                hold, hook.hold = hook.hold, None
                hook.held.set()
                hold.wait(60)
            status = hook.answers.pop(0) if hook.answers else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)) as port:
        hook.url = f"http://127.0.0.1:{port}/hook?token=SECRET-TOKEN"
        yield hook


@dataclass
class Mailbox:
    url: str = ""
    mails: list[Message] = field(default_factory=list)


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    from aiosmtpd.controller import Controller

    box = Mailbox()

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            box.mails.append(message_from_bytes(envelope.content, policy=policy.default))
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    box.url = f"smtp://127.0.0.1:{port}"
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class GateEndpoint:
    """A readiness endpoint: each GET is answered with the next of ``answers`` (then
    ``then``); an answer of 0 hangs for ``hang`` seconds without a word. ``asked`` holds
    the time of each request, by the server's clock."""

    url: str = ""
    answers: list[int] = field(default_factory=list)
    then: int = 200
    hang: float = 30.0
    asked: list[float] = field(default_factory=list)


@contextmanager
def gate_endpoint(*answers: int, then: int = 200) -> Iterator[GateEndpoint]:
    gate = GateEndpoint(answers=list(answers), then=then)
    quit_ = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            gate.asked.append(time.time())
            status = gate.answers.pop(0) if gate.answers else gate.then
            if status == 0:
                quit_.wait(gate.hang)
                return
            body = b"ready" if status < 300 else b"not ready"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    server.daemon_threads = True
    with serving(server) as port:
        gate.url = f"http://127.0.0.1:{port}/ready"
        try:
            yield gate
        finally:
            quit_.set()  # a hanging answer ends before the server shuts down


@dataclass
class RawEndpoint:
    """An HTTP endpoint that answers every request with ``answer``, byte for byte, and
    closes: a head and a body that no well-behaved server would send are its point.
    ``requests`` holds the start of each request it was sent."""

    url: str = ""
    answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    requests: list[bytes] = field(default_factory=list)


@contextmanager
def raw_endpoint(answer: bytes | None = None) -> Iterator[RawEndpoint]:
    import socket

    endpoint = RawEndpoint() if answer is None else RawEndpoint(answer=answer)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.02)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                request = b""
                try:
                    while b"\r\n\r\n" not in request:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        request += chunk
                    endpoint.requests.append(request[:200])
                    conn.sendall(endpoint.answer)
                except OSError:  # the client went away early: its business
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    endpoint.url = f"http://127.0.0.1:{listener.getsockname()[1]}/run"
    try:
        yield endpoint
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def http_answer(status: str, body: bytes) -> bytes:
    """An HTTP/1.1 answer, byte for byte, for :func:`raw_endpoint`: ``status`` (``200 OK``)
    and ``body``, with its length."""
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
