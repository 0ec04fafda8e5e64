"""/metrics for tests: the settings its checks read, and one scrape, parsed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cronchain.scheduler.settings import Settings
from cronchain.scheduler.web.metrics import DatabaseCollector, registry, render
from tests.support.engine import Clock
from tests.support.services import free_port

INTERVAL = 30.0  # the watchdog's: its grace is 15 s, as the engine fixture's


def settings(db: sqlalchemy.Engine, **values: Any) -> Settings:
    """The settings these tests read: a broker where nothing listens, unless given."""
    return Settings(
        database_url=db.url.render_as_string(hide_password=False),
        home=Path("."),
        watchdog_interval=INTERVAL,
        **{"broker_url": f"redis://127.0.0.1:{free_port()}/0", **values},
    )


def parsed(text: str) -> dict[tuple[str, tuple[Any, ...]], float]:
    """The text format as Prometheus reads it: {(name, sorted labels): value}."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[s.name, tuple(sorted(s.labels.items()))] = s.value
    return found


def samples(db: sqlalchemy.Engine, clock: Clock) -> dict[tuple[str, tuple[Any, ...]], float]:
    """One scrape as /metrics renders it, parsed; and the same from prometheus_client's
    own writer of the collector's families, which must say the same."""
    scraped = parsed(render(DatabaseCollector(db, settings(db), now=clock)).decode())
    assert parsed(generate_latest(registry(db, settings(db), now=clock)).decode()) == scraped
    return scraped
