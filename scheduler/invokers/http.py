"""The ``http`` kind: one request per attempt, guarded and redacted, on the process's
event loop (:mod:`.aio`), so that a work-path worker holds thousands of slow calls at once.

- The destination must be a public address unless ``CRONCHAIN_HTTP_ALLOW`` allows it
  (``scheduler.invokers.netguard``), checked at connect time, on every redirect too.
- ``timeout`` is a deadline for the whole request: connecting, sending, every redirect,
  the head and the body, so a server that trickles its answer a byte at a time is cut
  there too (reason ``timeout``).
- Redirects are followed up to ``max_redirects`` (default 5), as urllib followed them
  (which this replaced): a ``GET`` or ``HEAD`` on any of 301, 302, 303, 307 and 308, a
  ``POST`` on 301, 302 and 303, each as a ``GET`` without its body; any other is the
  answer. Secret headers and credentials (``Authorization``, ``Cookie``,
  ``Proxy-Authorization``) are not sent on to another origin (scheme, host and port),
  as curl and requests do.
- ``accept`` lists the status codes that succeed (default ``2xx``).
- The run's key (``Call.key``: its job and slot, or its trigger) goes out as
  ``Idempotency-Key``, the same on every attempt so that the endpoint can deduplicate
  retries; the invocation id as ``X-Cronchain-Invocation``, the attempt's number as
  ``X-Cronchain-Attempt``.
- Secret header values (``{secret: ...}`` or ``{env: NAME}``) are replaced by
  ``[secret]`` in everything written to history and logs, response bodies included.

HTTP/1.1 is spoken here, over asyncio's streams, one connection per request (``Connection:
close``, nothing pooled). Not with a full client (httpx, aiohttp): the guard must see the
address connected to on every hop, the deadline is one ``asyncio.timeout`` over all of
it, and an answer is read as leniently as http.client read it (a header of any bytes,
a NUL among them, must not fail a run whose status said it succeeded), where their
strict parsers (h11, llhttp) refuse it.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any
from urllib.parse import SplitResult, quote, urljoin, urlsplit, urlunsplit

from cronchain.scheduler.invokers import aio, netguard
from cronchain.scheduler.invokers.call import SUCCEEDED, Call, Outcome
from cronchain.scheduler.spec.model import HEADER_NAME, HTTP_METHODS
from cronchain.scheduler.version import VERSION
from cronchain.statemachine.reasons import Reason

DEFAULT_REDIRECTS = 5
READ_LIMIT = 64 * 1024  # bytes of a response body read at most
SNIPPET = 1024  # characters of it kept in the debug log
# Sent only to the origin they were given for: not on after a redirect to another one.
CREDENTIAL_HEADERS = ("Authorization", "Cookie", "Proxy-Authorization")
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_LINE = 64 * 1024  # bytes of an answer's status or header line, as http.client
MAX_HEADERS = 100  # headers of an answer, as http.client
REDIRECTS = (301, 302, 303, 307, 308)
# Set by cronchain, whatever the job's headers say: the request's framing.
FRAMING = {"content-length", "transfer-encoding", "connection"}
UNSENDABLE = ("\r", "\n", "\0")
UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # never in a request's target or host
EXPECT_BODY = ("POST", "PUT", "PATCH")  # said to have none by Content-Length: 0


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


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: dict[str, str]  # as the job names them; cronchain's own among them
    body: bytes | None
    private: frozenset[str]  # names (lower case) not sent on to another origin


class HttpInvoker:
    def __init__(self, allow: tuple[netguard.Network, ...] = ()):
        self.allow = allow

    def invoke(self, call: Call) -> Outcome:
        """The call made on the process's loop, this thread waiting for it."""
        return aio.run(self.ainvoke(call))

    async def ainvoke(self, call: Call) -> Outcome:
        o = call.options
        headers, secrets, missing = _headers(o["headers"])
        redact = Redactor(secrets)
        what = redact(f"http: {o['method']} {o['url']}")
        if missing:
            unset = f"{what}: environment variable {missing} is not set"
            return Outcome.failed(unset, Reason.LAUNCH)
        if any(c in value for value in headers.values() for c in UNSENDABLE):
            return Outcome.failed("a header's value holds CR, LF or NUL: not sent", Reason.LAUNCH)
        timeout = o["timeout"]
        if call.timeout is not None:
            timeout = min(timeout, call.timeout.total_seconds())
        own = {
            "Idempotency-Key": call.key,
            "X-Cronchain-Invocation": str(call.invocation_id),
            "X-Cronchain-Attempt": str(call.attempt),
        }
        ours = {name.lower() for name in own}  # they replace the job's, in any case
        headers = {n: v for n, v in headers.items() if n.lower() not in ours} | own
        secret_names = {n for n, v in o["headers"].items() if not isinstance(v, str)}
        private = {n.lower() for n in (*secret_names, *CREDENTIAL_HEADERS, "Host")}
        body = o["body"].encode() if o["body"] is not None else None
        request = Request(o["method"], o["url"], headers, body, frozenset(private))
        redirects = o.get("max_redirects", DEFAULT_REDIRECTS)
        try:
            async with asyncio.timeout(timeout):
                status, text = await self._fetch(request, redirects, timeout)
        except TimeoutError:
            return Outcome.failed(redact(f"{what}: no answer within {timeout:g}s"), Reason.TIMEOUT)
        except netguard.Refused as err:
            return Outcome.failed(redact(f"{what}: refused: {err}"), Reason.REFUSED)
        except (OSError, ValueError) as err:
            return Outcome.failed(redact(f"{what}: {type(err).__name__}: {err}"), Reason.LAUNCH)
        lines = (redact(f"answered {status}: {text}" if text else f"answered {status}"),)
        if accepted(status, o.get("accept", ["2xx"])):
            return Outcome(SUCCEEDED.status, log=lines)
        return Outcome.failed(f"{what} answered {status}", Reason.STATUS, lines)

    async def _fetch(self, request: Request, redirects: int, timeout: float) -> tuple[int, str]:
        """The status and the start of the body of the last answer, redirects followed."""
        deadline = time.monotonic() + timeout
        followed = 0
        while True:
            allowed = followed < redirects
            status, then, body = await _exchange(request, self.allow, deadline, allowed)
            if then is None:
                return status, _snippet(body)
            request, followed = then, followed + 1


async def _exchange(
    request: Request, allow: tuple[netguard.Network, ...], deadline: float, follow: bool
) -> tuple[int, Request | None, bytes]:
    """One request on a connection of its own: the status, and the request a redirect
    asks for when it is followed (its body left unread), or else the start of the body."""
    parts = urlsplit(request.url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http or https URL: {request.url}")
    tls = parts.scheme == "https"
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    sock = await netguard.open_connection(parts.hostname, port, allow, deadline)
    try:
        reader, writer = await asyncio.open_connection(
            sock=sock,
            ssl=_tls_context() if tls else None,
            server_hostname=parts.hostname if tls else None,
            limit=MAX_LINE,
        )
    except BaseException:
        sock.close()
        raise
    try:
        target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        writer.write(_head(request, target, _host(parts)))
        if request.body:
            writer.write(request.body)
        await writer.drain()
        status, headers = await _answer_head(reader)
        location = headers.get("location", headers.get("uri"))
        if follow and status in REDIRECTS and location is not None:
            then = redirected(request, status, location)
            if then is not None:
                return status, then, b""
        if request.method == "HEAD" or status in (204, 304):
            return status, None, b""
        return status, None, await _body(reader, headers)
    finally:
        writer.transport.abort()  # at once: a cut connection frees the server and the socket


def _host(parts: SplitResult) -> str:
    """The ``Host`` header, as http.client wrote it: an international name in IDNA, an
    IPv6 address in brackets, the port only when it is not the scheme's own."""
    name = parts.hostname or ""
    name = f"[{name}]" if ":" in name else name.encode("idna").decode("ascii")
    port = parts.port
    return name if port in (None, DEFAULT_PORTS[parts.scheme]) else f"{name}:{port}"


def _head(request: Request, target: str, host: str) -> bytes:
    """The request's line and headers: the job's (Latin-1, as HTTP carries them),
    cronchain's own, and the request's framing. The job's spec was checked when it was
    applied; what goes on the wire is checked again here, as http.client checked it, so
    that no stored option can split the request."""
    _check(request, target, host)
    given = {name.lower() for name in request.headers}
    lines = [f"{request.method} {target} HTTP/1.1"]
    if "host" not in given:
        lines.append(f"Host: {host}")
    lines += [f"{n}: {v}" for n, v in request.headers.items() if n.lower() not in FRAMING]
    if "user-agent" not in given:
        lines.append(f"User-Agent: cronchain/{VERSION}")
    if "accept-encoding" not in given:
        lines.append("Accept-Encoding: identity")  # the body read for the log is plain
    if request.body is not None or request.method in EXPECT_BODY:
        lines.append(f"Content-Length: {len(request.body or b'')}")
    if request.body is not None and "content-type" not in given:
        lines.append("Content-Type: application/x-www-form-urlencoded")  # as urllib
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _check(request: Request, target: str, host: str) -> None:
    if request.method not in HTTP_METHODS:
        raise ValueError(f"{request.method!r} is not one of {', '.join(HTTP_METHODS)}")
    if UNSAFE.search(target) or UNSAFE.search(host):
        raise ValueError("the URL holds a space or a control character")
    for name in request.headers:
        if not HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a header's name")


async def _answer_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and headers (names in lower case) of the answer, 1xx skipped. Read as
    http.client read them, leniently: a header of any bytes is kept as Latin-1, a line
    that is no header is passed over, and only the status line must be one. Bounded as
    http.client bounds them: a line of 64 KiB, a hundred headers."""
    while True:
        line = await _line(reader, "the status line")
        if not line:
            raise ConnectionResetError("the server closed the connection without an answer")
        version, code, *_ = [*line.split(None, 2), "", ""]
        if not (version.startswith("HTTP/") and len(code) == 3 and code.isdecimal()):
            raise ValueError(f"not an HTTP answer: {line[:80]!r}")
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = await _line(reader, "a header line")
            if not line.strip():
                break
            name, colon, value = line.partition(":")
            if colon:
                headers.setdefault(name.strip().lower(), value.strip())
        else:
            raise ValueError(f"more than {MAX_HEADERS} headers")
        if not 100 <= int(code) < 200:
            return int(code), headers


async def _line(reader: asyncio.StreamReader, what: str) -> str:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        line = err.partial  # the end of the stream: no more lines
    except asyncio.LimitOverrunError:
        raise ValueError(f"{what} longer than {MAX_LINE} bytes") from None
    return line.rstrip(b"\r\n").decode("latin-1")


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The start of the body, by its framing; one cut short or framed wrongly is logged
    empty, but one that runs past the deadline fails the request (the deadline's
    cancellation is not caught here)."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _chunks(reader)
        length = headers.get("content-length", "")
        if length.isdigit():
            return await reader.readexactly(min(int(length), READ_LIMIT))
        return await _up_to(reader, READ_LIMIT)  # to the end of the connection
    except TimeoutError:
        raise
    except (OSError, ValueError, EOFError, asyncio.LimitOverrunError):
        return b""


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    data = bytearray()
    while len(data) < READ_LIMIT:
        size = int((await _line(reader, "a chunk's size")).split(";")[0].strip(), 16)
        if size == 0:
            break
        data += await reader.readexactly(min(size, READ_LIMIT - len(data)))
        if len(data) < READ_LIMIT:
            await reader.readexactly(2)  # the chunk's CRLF
    return bytes(data)


async def _up_to(reader: asyncio.StreamReader, limit: int) -> bytes:
    data = bytearray()
    while len(data) < limit and (more := await reader.read(limit - len(data))):
        data += more
    return bytes(data)


def redirected(request: Request, status: int, location: str) -> Request | None:
    """The request that a redirect asks for, as urllib made it; None when the redirect
    is itself the answer (a method that is not redirected, a scheme not http(s))."""
    method = request.method
    if not (method in ("GET", "HEAD") or (status in (301, 302, 303) and method == "POST")):
        return None
    parts = urlsplit(location.replace(" ", "%20"))
    if not parts.path and parts.netloc:
        parts = parts._replace(path="/")
    url = quote(
        urljoin(request.url, urlunsplit(parts)), encoding="iso-8859-1", safe=string.punctuation
    )
    if urlsplit(url).scheme not in DEFAULT_PORTS:
        return None
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in ("content-length", "content-type")
        and (origin(url) == origin(request.url) or name.lower() not in request.private)
    }
    return replace(
        request, method="HEAD" if method == "HEAD" else "GET", url=url, headers=headers, body=None
    )


@cache
def _tls_context() -> ssl.SSLContext:
    """The system's certificate authorities and hostname checks (built once: loading
    the authorities takes milliseconds)."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])  # as http.client offered it
    return context


def origin(url: str) -> tuple[str, str | None, int | None]:
    """A URL's scheme, host and port, the port filled in when the URL leaves it out."""
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme)


def accepted(status: int, accept: list[int | str]) -> bool:
    return any(status == a if isinstance(a, int) else str(status)[0] == a[0] for a in accept)


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


def _snippet(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text[:SNIPPET] + (f"... ({len(text) - SNIPPET} more)" if len(text) > SNIPPET else "")
