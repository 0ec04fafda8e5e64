"""The ``http`` kind: one request per attempt, guarded and redacted.

- The destination must be a public address unless ``CRONCHAIN_HTTP_ALLOW`` allows it
  (``scheduler.invokers.netguard``), checked at connect time, on every redirect too.
- Redirects are followed up to ``max_redirects`` (default 5); secret headers are not sent
  on to another origin.
- ``accept`` lists the status codes that succeed (default ``2xx``).
- The invocation id goes out as ``Idempotency-Key`` (the same on every attempt, so the
  endpoint can deduplicate retries) and ``X-Cronchain-Invocation``; the attempt's
  number as ``X-Cronchain-Attempt``.
- Secret header values (``{secret: ...}`` or ``{env: NAME}``) are replaced by
  ``[secret]`` in everything written to history and logs, response bodies included.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from functools import partial
from typing import Any
from urllib.parse import quote, urlsplit

from scheduler.invokers import netguard
from scheduler.invokers.call import SUCCEEDED, Call, Outcome

DEFAULT_REDIRECTS = 5
READ_LIMIT = 64 * 1024  # bytes of a response body read at most
SNIPPET = 1024  # characters of it kept in the debug log


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


def _guarded(base: type[http.client.HTTPConnection], allow: tuple[netguard.Network, ...]):
    class Guarded(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._create_connection = self._connect_guarded

        def _connect_guarded(self, address, timeout=None, source_address=None):  # type: ignore[no-untyped-def]
            host, port = address
            return netguard.connect(host, port, timeout, allow, source_address)

    return Guarded


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows at most ``limit`` redirects in all (urllib's own limit counts distinct
    URLs, so a loop on one URL goes round several times)."""

    def __init__(self, limit: int, secret_headers: set[str]):
        self.limit = limit
        self.secret_headers = {h.capitalize() for h in secret_headers}

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        followed = getattr(req, "cronchain_redirects", 0)
        if followed >= self.limit:
            return None  # the 3xx itself is the answer, judged by ``accept``
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        new.cronchain_redirects = followed + 1
        if _origin(new.full_url) != _origin(req.full_url):
            for name in self.secret_headers:
                new.headers.pop(name, None)
                new.unredirected_hdrs.pop(name, None)
        return new


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _opener(allow: tuple[netguard.Network, ...], redirects: int, secret: set[str]):
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # type: ignore[no-untyped-def]
            return self.do_open(_guarded(http.client.HTTPConnection, allow), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # type: ignore[no-untyped-def]
            connection = partial(_guarded(http.client.HTTPSConnection, allow))
            return self.do_open(connection, req, context=self._context)

    opener = urllib.request.OpenerDirector()
    for handler in (
        Http(),
        Https(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        _Redirects(redirects, secret),
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
        request.add_header("Idempotency-Key", f"cronchain-{call.invocation_id}")
        request.add_header("X-Cronchain-Invocation", str(call.invocation_id))
        request.add_header("X-Cronchain-Attempt", str(call.attempt))
        secret_names = {n for n, v in o["headers"].items() if not isinstance(v, str)}
        opener = _opener(self.allow, o.get("max_redirects", DEFAULT_REDIRECTS), secret_names)
        answer = _send(opener, request, timeout)
        if isinstance(answer, Outcome):
            return Outcome.failed(redact(f"{what}: {answer.error}"), answer.reason)
        status, text = answer
        lines = (redact(f"answered {status}: {text}" if text else f"answered {status}"),)
        if accepted(status, o.get("accept", ["2xx"])):
            return Outcome(SUCCEEDED.status, log=lines)
        return Outcome.failed(f"{what} answered {status}", "status", lines)


def _send(
    opener: Any, request: urllib.request.Request, timeout: float
) -> tuple[int, str] | Outcome:
    """The status and the start of the body, or the failure to get them."""
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, _read(response)
    except urllib.error.HTTPError as err:
        return err.code, _read(err)
    except urllib.error.URLError as err:
        if isinstance(err.reason, netguard.Refused):
            return Outcome.failed(f"refused: {err.reason}", "refused")
        if isinstance(err.reason, TimeoutError):
            return Outcome.failed(f"no answer within {timeout:g}s", "timeout")
        return Outcome.failed(str(err.reason), "launch")
    except netguard.Refused as err:
        return Outcome.failed(f"refused: {err}", "refused")
    except TimeoutError:
        return Outcome.failed(f"no answer within {timeout:g}s", "timeout")
    except (OSError, http.client.HTTPException, ValueError) as err:
        # ValueError: a header value from the environment that HTTP cannot carry.
        return Outcome.failed(f"{type(err).__name__}: {err}", "launch")


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
    try:
        data = response.read(READ_LIMIT)
    except (OSError, http.client.HTTPException):
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    return text[:SNIPPET] + (f"... ({len(text) - SNIPPET} more)" if len(text) > SNIPPET else "")
