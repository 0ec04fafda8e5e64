"""Where alerts go: a webhook (JSON, Slack-compatible or PagerDuty Events v2) or email
over SMTP, declared once under ``channels:`` in a job file, or in the environment as
``CRONCHAIN_CHANNELS`` (a JSON object of the same form: ``scheduler.spec.channels``).

A secret is never written down: a webhook's URL (Slack's holds its token), a PagerDuty
routing key and the SMTP server's password are named by the environment variable that
holds them (``{env: NAME}``) and read by the worker that delivers. Errors recorded for
a delivery never quote them.

Every delivery carries the alert's idempotency key (the ``Idempotency-Key`` header of a
webhook, the ``Message-ID`` of a mail, PagerDuty's ``dedup_key``), so that a receiver
can tell a delivery that was repeated (a worker killed after the receiver had it, before
cronchain recorded it) from a new alert.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import smtplib
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from cronchain.scheduler import outside
from cronchain.scheduler.spec.channels import SMTP_ENV


@dataclass(frozen=True)
class Alert:
    """What a channel says: the alert as its row holds it, and its job."""

    id: int
    job: str
    event: str
    slot: datetime | None
    invocation_id: int
    detail: str | None
    raised_at: datetime

    @property
    def key(self) -> str:
        """The idempotency key: (job, slot, event), as the alert's row is keyed."""
        slot = f"run-{self.invocation_id}"
        if self.slot is not None:
            slot = self.slot.strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"cronchain/{self.job}/{slot}/{self.event}"

    @property
    def headline(self) -> str:
        """The alert in cronchain's own words alone: a job name, a slot and an event,
        never text from outside (a mail's subject)."""
        slot = self.slot.isoformat() if self.slot else f"run {self.invocation_id}"
        return f"cronchain: {self.job} {slot} {self.event}"

    @property
    def text(self) -> str:
        """The headline and the detail, which may quote what a task, an endpoint or a
        gate said: each channel escapes it for what it reads (``body_of``, ``_mail``)."""
        return f"{self.headline}: {self.detail}" if self.detail else self.headline

    def as_json(self) -> dict[str, Any]:
        return {
            "idempotency_key": self.key,
            "alert": self.id,
            "job": self.job,
            "event": self.event,
            "slot": self.slot.isoformat() if self.slot else None,
            "invocation": self.invocation_id,
            "detail": self.detail,
            "raised_at": self.raised_at.isoformat(),
            "text": self.text,
        }


class DeliveryError(Exception):
    """A delivery that did not go through; its text never holds a secret."""


def deliver(
    channel: Mapping[str, Any], alert: Alert, timeout: float, env: Mapping[str, str] | None = None
) -> None:
    """Send ``alert`` to one channel (its stored form); raises ``DeliveryError``."""
    env = os.environ if env is None else env
    if "webhook" in channel:
        _post(channel, alert, timeout, env)
    else:
        _mail(channel, alert, timeout, env)


def _secret(value: str | Mapping[str, str], env: Mapping[str, str], what: str) -> str:
    if isinstance(value, str):
        return value
    found = env.get(value["env"], "").strip()
    if not found:
        raise DeliveryError(f"{what}: the environment variable {value['env']} is not set")
    return found


def body_of(channel: Mapping[str, Any], alert: Alert, env: Mapping[str, str]) -> dict[str, Any]:
    """The JSON a webhook of ``channel``'s format is sent."""
    match channel.get("format") or "json":
        case "slack":  # its markup (<!channel>, <url|label>) escaped, and none read
            return {"text": slack_escaped(alert.text), "mrkdwn": False}
        case "pagerduty":
            failing = alert.event in ("failed", "retries_exhausted", "recovered")
            return {
                "routing_key": _secret(channel["routing_key"], env, "routing_key"),
                # A job's failures are one incident, which ``recovered`` resolves; any
                # other event is an incident of its own, for a person to resolve.
                "event_action": "resolve" if alert.event == "recovered" else "trigger",
                "dedup_key": f"cronchain/{alert.job}/failing" if failing else alert.key,
                "payload": {  # plain text, on one line
                    "summary": outside.one_line(alert.text)[:1024],
                    "source": "cronchain",
                    "severity": "warning" if ">" in alert.event else "error",
                    "timestamp": alert.raised_at.isoformat(),
                    "custom_details": alert.as_json(),
                },
            }
        case _:
            return alert.as_json()


def slack_escaped(text: str) -> str:
    """``text`` as Slack shows it literally: its three control characters escaped, as
    Slack's "Formatting text" asks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _post(channel: Mapping[str, Any], alert: Alert, timeout: float, env: Mapping[str, str]) -> None:
    url = _secret(channel["webhook"], env, "webhook")
    body = json.dumps(body_of(channel, alert, env)).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": alert.key}
    try:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read(65536)
    except urllib.error.HTTPError as err:
        raise DeliveryError(f"the webhook answered HTTP {err.code}") from None
    except (OSError, ValueError, http.client.HTTPException) as err:  # refused, timeouts, bad URLs
        reason = getattr(err, "reason", err)
        raise DeliveryError(f"the webhook did not answer: {_quiet(reason, url)}") from None


def _mail(channel: Mapping[str, Any], alert: Alert, timeout: float, env: Mapping[str, str]) -> None:
    server = _secret(channel.get("smtp") or {"env": SMTP_ENV}, env, "smtp")
    parts = urlsplit(server)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise DeliveryError("smtp: the server must be an smtp:// or smtps:// URL")
    message = EmailMessage()
    message["From"] = channel.get("from") or "cronchain@localhost"
    message["To"] = ", ".join(channel["email"])
    message["Subject"] = alert.headline  # a header refuses CR and LF: the detail is below
    message["Date"] = format_datetime(alert.raised_at)
    digest = hashlib.sha256(alert.key.encode()).hexdigest()[:32]
    message["Message-ID"] = f"<{digest}@cronchain>"
    message["Idempotency-Key"] = alert.key
    message.set_content(json.dumps(alert.as_json(), indent=2))
    try:
        port = parts.port or (465 if parts.scheme == "smtps" else 25)
        if parts.scheme == "smtps":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                parts.hostname, port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            client = smtplib.SMTP(parts.hostname, port, timeout=timeout)
        with client:
            client.ehlo()
            if parts.scheme == "smtp" and client.has_extn("starttls"):
                client.starttls(context=ssl.create_default_context())
                client.ehlo()
            if parts.username:
                client.login(unquote(parts.username), unquote(parts.password or ""))
            client.send_message(message)
    except (OSError, ValueError, smtplib.SMTPException) as err:  # UnicodeError is a ValueError
        raise DeliveryError(f"the mail server did not take it: {_quiet(err, server)}") from None


def _quiet(err: object, secret: str) -> str:
    """An error's first line, without the URL it was about or any part of it that may
    hold a token (its host and port, its path, its user, password and query)."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    parts = urlsplit(secret)
    pieces = [secret, parts.netloc, parts.path, parts.query, parts.username, parts.password]
    for piece in sorted((p for p in pieces if p and len(p) > 1), key=len, reverse=True):
        text = text.replace(piece, "(hidden)")
    return text[:300] or type(err).__name__
