"""Alert channels as a job file or the environment declares them: a webhook (JSON,
Slack-compatible or PagerDuty Events v2) or email over SMTP, under ``channels:`` or in
``CRONCHAIN_CHANNELS`` (a JSON object of the same form). Their delivery is
``scheduler.alerts.channels``'s.

A secret is never written down: a webhook's URL (Slack's holds its token), a PagerDuty
routing key and the SMTP server's password are named by the environment variable that
holds them (``{env: NAME}``) and read by the worker that delivers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.model import MAX_URL, _spec_error, _Strict

ENV = "CRONCHAIN_CHANNELS"
SMTP_ENV = "CRONCHAIN_SMTP_URL"
_ADDRESS = re.compile(r"[^@\s<>,;]+@[^@\s<>,;]+")
EnvRef = Annotated[
    dict[Literal["env"], Annotated[str, Field(min_length=1, max_length=200)]],
    Field(min_length=1, max_length=1),
]


class Channel(_Strict):
    """One channel: ``webhook`` (a URL or ``{env: NAME}``, with a ``format``) or
    ``email`` (recipients, sent through ``smtp``, ``{env: NAME}`` of an
    ``smtp://user:password@host:port`` URL, ``CRONCHAIN_SMTP_URL`` by default)."""

    model_config = ConfigDict(populate_by_name=True)

    webhook: Annotated[str, Field(max_length=MAX_URL)] | EnvRef | None = None
    format: Literal["json", "slack", "pagerduty"] | None = None
    routing_key: EnvRef | None = None  # a secret: from the environment only
    email: Annotated[list[str], Field(min_length=1, max_length=50)] | None = None
    sender: str | None = Field(None, alias="from")
    smtp: EnvRef | None = None

    @field_validator("webhook")
    @classmethod
    def _url(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("must be an http(s) URL, or {env: NAME} for a secret one")
        return value

    @field_validator("email")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        for address in value or ():
            if not _ADDRESS.fullmatch(address):
                raise ValueError(f"{address!r} is not an email address")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Channel:
        if (self.webhook is None) == (self.email is None):
            raise SpecError("channel", "needs exactly one of webhook and email")
        if self.webhook is None:
            for key in ("format", "routing_key"):
                if getattr(self, key) is not None:
                    raise SpecError(key, "only applies to a webhook")
        elif self.sender is not None or self.smtp is not None:
            raise SpecError("from" if self.sender else "smtp", "only applies to email")
        if (self.format == "pagerduty") != (self.routing_key is not None):
            raise SpecError("routing_key", "is what a pagerduty webhook needs, and it alone")
        if self.sender is not None and not _ADDRESS.fullmatch(self.sender):
            raise SpecError("from", f"{self.sender!r} is not an email address")
        return self

    def stored(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class _One(_Strict):
    """One channel, as the first part of an error's path, which ``_spec_error`` drops
    (there it is a job's kind)."""

    channel: Channel


def validate_channels(data: Any, where: str = "channels") -> dict[str, dict[str, Any]]:
    """A ``channels:`` mapping, validated: name -> the stored form."""
    if not isinstance(data, Mapping):
        raise SpecError(where, "must be a mapping of channel names")
    out = {}
    for name, spec in data.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
            raise SpecError(where, f"{name!r} is not a channel name")
        try:
            out[name] = _One.model_validate({"channel": spec}).channel.stored()
        except ValidationError as err:
            raise _spec_error(err).located(f"{where}.{name}") from None
        except SpecError as err:
            raise err.located(f"{where}.{name}") from None
    return out


def from_env(env: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """``CRONCHAIN_CHANNELS``, validated; {} when unset."""
    text = (os.environ if env is None else env).get(ENV, "").strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as err:
        raise SpecError(ENV, f"is not JSON ({err})") from None
    return validate_channels(data, ENV)
