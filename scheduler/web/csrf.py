"""Cross-site request forgery: why a browser's POST to a control is believed.

A signed-in operator's browser sends the basic-auth credentials with every request to
the page's origin, including a form another site makes it post. So a control's POST
must show two things no other site can: the form's token, an HMAC of a fixed label
keyed by the credentials (a site without them cannot compute it; it is the same in
every form and every ``cronchain serve`` with the same credentials, so a page served
by one process posts to another), compared in constant time; and an ``Origin`` header,
or failing it a ``Referer``, naming this host (browsers send ``Origin`` with every
cross-site POST and scripts cannot forge it). A POST with neither header is refused:
a script that posts (curl) sends ``Origin`` itself.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from flask import Request

FIELD = "csrf_token"  # the form field that carries the token
_LABEL = b"cronchain web controls v1"


def token(credentials: str) -> str:
    """The forms' token for ``credentials`` (USER:PASSWORD): it reveals nothing of them."""
    return hmac.new(credentials.encode(), _LABEL, hashlib.sha256).hexdigest()


def refusal(request: Request, credentials: str) -> str | None:
    """Why the POST ``request`` is refused as forged, or None if it is believed."""
    given = request.form.get(FIELD, "")
    if not hmac.compare_digest(given.encode(), token(credentials).encode()):
        return "the form's token is missing or wrong: reload the page and try again"
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return "the request names no Origin or Referer"
    if urlsplit(source).netloc.lower() != request.host.lower():
        return "the request comes from another site"
    return None
