"""The ``http`` kind: one request per attempt, guarded and redacted.

- The destination must be a public address unless ``CRONCHAIN_HTTP_ALLOW`` allows it
  (``scheduler.invokers.netguard``), checked at connect time, on every redirect too.
- ``timeout`` is a deadline for the whole request: connecting, sending, every redirect,
  the head and the body. Each blocking step may take only what is left of it, so a server
  that trickles its answer a byte at a time is cut there too (reason ``timeout``).
- Redirects are followed up to ``max_redirects`` (default 5); secret headers and
  credentials (``Authorization``, ``Cookie``, ``Proxy-Authorization``) are not sent on to
  another origin (scheme, host and port), as curl and requests do.
- ``accept`` lists the status codes that succeed (default ``2xx``).
- The invocation id goes out as ``Idempotency-Key`` (the same on every attempt, so the
  endpoint can deduplicate retries) and ``X-Cronchain-Invocation``; the attempt's
  number as ``X-Cronchain-Attempt``.
- Secret header values (``{secret: ...}`` or ``{env: NAME}``) are replaced by
  ``[secret]`` in everything written to history and logs, response bodies included.
"""

from __future__ import annotations

import http.client
import io
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from functools import partial
from typing import Any
from urllib.parse import quote, urlsplit

from cronchain.scheduler.invokers import netguard
from cronchain.scheduler.invokers.call import SUCCEEDED, Call, Outcome

DEFAULT_REDIRECTS = 5
READ_LIMIT = 64 * 1024  # bytes of a response body read at most
SNIPPET = 1024  # characters of it kept in the debug log
# Sent only to the origin they were given for: not on after a redirect to another one.
CREDENTIAL_HEADERS = ("Authorization", "Cookie", "Proxy-Authorization")
DEFAULT_PORTS = {"http": 80, "https": 443}


class Redactor:
    def __init__(self, secrets: Iterable[str]):
        variants = set()
        for secret in secrets:
            variants |= {secret, quote(secret, safe=""), quote(secret)}
        self.secrets = sorted((v for v in variants if v), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[secret]")
        return text


class Deadline:
    """The one clock of a request: every blocking step asks it for what is left, and a
    step that finds nothing left fails with ``TimeoutError``."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within {self.seconds:g}s")
        return left


class _DeadlineSocket:
    """A connected socket, plain or TLS, whose every send and receive may take only what
    is left of the deadline. A socket's own timeout bounds one call, which a server that
    trickles its bytes meets on every call; this bounds them all together."""

    def __init__(self, sock: socket.socket, deadline: Deadline):
        self._sock = sock
        self._deadline = deadline

    def sendall(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view:
            self._sock.settimeout(self._deadline.left())
            view = view[self._sock.send(view) :]

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"only reads are timed, not mode {mode!r}")
        raw = self._sock.makefile("rb", buffering=0)  # counted by the socket, as http wants
        return io.BufferedReader(_DeadlineReader(raw, self._sock, self._deadline))

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, raw: Any, sock: socket.socket, deadline: Deadline):
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.left())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _guarded(
    base: type[http.client.HTTPConnection],
    allow: tuple[netguard.Network, ...],
    deadline: Deadline,
):
    class Guarded(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._create_connection = self._connect_guarded

        def _connect_guarded(self, address, timeout=None, source_address=None):  # type: ignore[no-untyped-def]
            host, port = address
            sock = netguard.connect(host, port, None, allow, source_address, deadline.at)
            try:
                sock.settimeout(deadline.left())  # what the TLS handshake, if any, may take
            except BaseException:  # the deadline passed while connecting
                sock.close()
                raise
            return sock

        def connect(self) -> None:
            super().connect()
            self.sock = _DeadlineSocket(self.sock, deadline)

    return Guarded


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows at most ``limit`` redirects in all, within the deadline (urllib's own
    limits count distinct URLs and stop at 10, so they are set out of the way)."""

    def __init__(self, limit: int, secret_headers: set[str], deadline: Deadline):
        self.limit = limit
        self.max_repeats = self.max_redirections = limit + 1
        names = (*secret_headers, *CREDENTIAL_HEADERS)
        self.private_headers = {h.capitalize() for h in names}  # as urllib stores them
        self.deadline = deadline

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        try:
            self.deadline.left()
        except BaseException:  # out of time: the 3xx is closed, not left to the collector
            fp.close()
            raise
        followed = getattr(req, "cronchain_redirects", 0)
        if followed >= self.limit:
            return None  # the 3xx itself is the answer, judged by ``accept``
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        fp.close()  # unread: urllib would read all of the body, whatever its size
        new.cronchain_redirects = followed + 1
        if origin(new.full_url) != origin(req.full_url):
            for name in self.private_headers:
                new.headers.pop(name, None)
                new.unredirected_hdrs.pop(name, None)
        return new


def origin(url: str) -> tuple[str, str | None, int | None]:
    """A URL's scheme, host and port, the port filled in when the URL leaves it out."""
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme)


def _opener(
    allow: tuple[netguard.Network, ...], redirects: int, secret: set[str], deadline: Deadline
):
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # type: ignore[no-untyped-def]
            return self.do_open(_guarded(http.client.HTTPConnection, allow, deadline), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # type: ignore[no-untyped-def]
            connection = partial(_guarded(http.client.HTTPSConnection, allow, deadline))
            return self.do_open(connection, req, context=self._context)

    opener = urllib.request.OpenerDirector()
    for handler in (
        Http(),
        Https(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        _Redirects(redirects, secret, deadline),
    ):
        opener.add_handler(handler)
    return opener


def accepted(status: int, accept: list[int | str]) -> bool:
    return any(status == a if isinstance(a, int) else str(status)[0] == a[0] for a in accept)


class HttpInvoker:
    def __init__(self, allow: tuple[netguard.Network, ...] = ()):
        self.allow = allow

    def invoke(self, call: Call) -> Outcome:
        o = call.options
        headers, secrets, missing = _headers(o["headers"])
        redact = Redactor(secrets)
        what = redact(f"http: {o['method']} {o['url']}")
        if missing:
            return Outcome.failed(f"{what}: environment variable {missing} is not set", "launch")
        timeout = o["timeout"]
        if call.timeout is not None:
            timeout = min(timeout, call.timeout.total_seconds())
        body = o["body"].encode() if o["body"] is not None else None
        request = urllib.request.Request(o["url"], data=body, method=o["method"])
        for name, value in headers.items():
            request.add_header(name, value)
        request.add_header("Idempotency-Key", call.key)
        request.add_header("X-Cronchain-Invocation", str(call.invocation_id))
        request.add_header("X-Cronchain-Attempt", str(call.attempt))
        secret_names = {n for n, v in o["headers"].items() if not isinstance(v, str)}
        deadline = Deadline(timeout)
        redirects = o.get("max_redirects", DEFAULT_REDIRECTS)
        answer = _send(_opener(self.allow, redirects, secret_names, deadline), request, deadline)
        if isinstance(answer, Outcome):
            return Outcome.failed(redact(f"{what}: {answer.error}"), answer.reason)
        status, text = answer
        lines = (redact(f"answered {status}: {text}" if text else f"answered {status}"),)
        if accepted(status, o.get("accept", ["2xx"])):
            return Outcome(SUCCEEDED.status, log=lines)
        return Outcome.failed(f"{what} answered {status}", "status", lines)


def _send(
    opener: Any, request: urllib.request.Request, deadline: Deadline
) -> tuple[int, str] | Outcome:
    """The status and the start of the body, or the failure to get them."""
    late = f"no answer within {deadline.seconds:g}s"
    try:
        return _answer(opener, request, deadline)
    except urllib.error.URLError as err:
        if isinstance(err.reason, netguard.Refused):
            return Outcome.failed(f"refused: {err.reason}", "refused")
        if isinstance(err.reason, TimeoutError):
            return Outcome.failed(late, "timeout")
        return Outcome.failed(str(err.reason), "launch")
    except netguard.Refused as err:
        return Outcome.failed(f"refused: {err}", "refused")
    except TimeoutError:
        return Outcome.failed(late, "timeout")
    except ValueError as err:  # a header value from the environment HTTP cannot carry
        if str(err).startswith("Invalid header"):  # http.client quotes it: a secret
            return Outcome.failed("a header's value holds CR, LF or NUL: not sent", "launch")
        return Outcome.failed(f"{type(err).__name__}: {err}", "launch")
    except (OSError, http.client.HTTPException) as err:
        return Outcome.failed(f"{type(err).__name__}: {err}", "launch")


def _answer(opener: Any, request: urllib.request.Request, deadline: Deadline) -> tuple[int, str]:
    try:
        response = opener.open(request, timeout=deadline.seconds)
    except urllib.error.HTTPError as err:
        response = err  # a status urllib calls an error: judged by ``accept`` all the same
    try:
        return response.status, _read(response)
    finally:
        response.close()  # at once, so a cut connection frees the server and the socket


def _headers(spec: dict[str, Any]) -> tuple[dict[str, str], list[str], str | None]:
    """Resolve header values: (headers, the secret values, a missing env variable)."""
    headers: dict[str, str] = {}
    secrets: list[str] = []
    for name, value in spec.items():
        if isinstance(value, str):
            headers[name] = value
            continue
        if "env" in value:
            resolved = os.environ.get(value["env"])
            if resolved is None:
                return {}, secrets, value["env"]
        else:
            resolved = value["secret"]
        headers[name] = resolved
        secrets.append(resolved)
    return headers, secrets, None


def _read(response: Any) -> str:
    """The start of the body for the log; a body cut short is logged empty, but one that
    runs past the deadline fails the request."""
    try:
        data = response.read(READ_LIMIT)
    except TimeoutError:
        raise
    except (OSError, http.client.HTTPException):
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    return text[:SNIPPET] + (f"... ({len(text) - SNIPPET} more)" if len(text) > SNIPPET else "")
