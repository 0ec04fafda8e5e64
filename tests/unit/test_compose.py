"""docker-compose.yml runs the same commands the README and the tests use: the two paths'
workers (the work path's on its queue and threads, as scheduler.settings defaults them),
beat and Flower, after a one-shot migration."""

from __future__ import annotations

from pathlib import Path

import yaml

from scheduler.settings import WORK_CONCURRENCY, Settings

ROOT = Path(__file__).resolve().parents[2]


def test_compose_describes_the_production_topology():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "worker", "work", "beat", "flower"}
    commands = {name: " ".join(s.get("command", [])) for name, s in services.items()}
    assert commands["migrate"] == "cronchain db upgrade"
    assert commands["worker"].startswith("celery -A tasks worker")
    work = (
        f"celery -A tasks worker --queues {Settings.work_queue} --pool threads"
        f" --concurrency {WORK_CONCURRENCY} --loglevel INFO"
    )
    assert commands["work"] == work
    assert commands["beat"].startswith("celery -A tasks beat")
    assert commands["flower"].startswith("celery -A tasks flower --basic-auth=")
    readme = (ROOT / "README.md").read_text()
    for command in (
        "cronchain db upgrade",
        "celery -A tasks worker",
        "celery -A tasks beat",
        "celery -A tasks flower --basic-auth",
        work,
    ):
        assert command in readme
    for name in ("worker", "work"):
        env = services[name]["environment"]
        assert env["CRONCHAIN_DATABASE_URL"].startswith("postgresql://")
        assert env["CRONCHAIN_BROKER_URL"].startswith("redis://")
        assert services[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}
        }
