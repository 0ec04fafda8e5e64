"""docker-compose.yml runs the same commands the README and the tests use."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_describes_the_production_topology():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "worker", "beat", "flower"}
    commands = {name: " ".join(s.get("command", [])) for name, s in services.items()}
    assert commands["migrate"] == "cronchain db upgrade"
    assert commands["worker"].startswith("celery -A tasks worker")
    assert commands["beat"].startswith("celery -A tasks beat")
    assert commands["flower"].startswith("celery -A tasks flower --basic-auth=")
    readme = (ROOT / "README.md").read_text()
    for command in (
        "cronchain db upgrade",
        "celery -A tasks worker",
        "celery -A tasks beat",
        "celery -A tasks flower --basic-auth",
    ):
        assert command in readme
    env = services["worker"]["environment"]
    assert env["CRONCHAIN_DATABASE_URL"].startswith("postgresql://")
    assert env["CRONCHAIN_BROKER_URL"].startswith("redis://")
