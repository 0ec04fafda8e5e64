"""docker-compose.yml runs the same commands the README and the tests use: the two paths'
workers (the work path's on its queue and threads, as scheduler.settings defaults them),
beat, Flower and cronchain serve, after a one-shot migration; every long-running
service has a health check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from cronchain.scheduler.settings import WORK_CONCURRENCY, Settings
from cronchain.scheduler.web import CHECKS
from tests.support.repo import manual

ROOT = Path(__file__).resolve().parents[2]


def test_compose_describes_the_production_topology():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "worker",
        "work",
        "beat",
        "flower",
        "web",
    }
    commands = {name: " ".join(s.get("command", [])) for name, s in services.items()}
    assert commands["migrate"] == "cronchain db upgrade"
    assert commands["worker"].startswith("celery -A cronchain.tasks worker")
    work = (
        f"celery -A cronchain.tasks worker --queues {Settings.work_queue} --pool threads"
        f" --concurrency {WORK_CONCURRENCY} --loglevel INFO"
    )
    assert commands["work"] == work
    assert commands["beat"].startswith("celery -A cronchain.tasks beat")
    assert commands["flower"].startswith("celery -A cronchain.tasks flower --basic-auth=")
    assert commands["web"] == "cronchain serve --host 0.0.0.0 --port 8080"
    readme = manual()
    for command in (
        "cronchain db upgrade",
        "celery -A cronchain.tasks worker",
        "celery -A cronchain.tasks beat",
        "celery -A cronchain.tasks flower --basic-auth",
        "cronchain serve --host 0.0.0.0",
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


def test_every_service_has_a_health_check_and_web_its_credentials():
    """A one-shot migration aside, each service says when it is healthy, with a command
    that exists: Celery's ping for the workers (named as Celery names them), cronchain's
    own watchdog check for beat. ``web`` listens beyond loopback, so its credentials are
    required, as Flower's password is."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    checked = {name for name, s in services.items() if "healthcheck" in s}
    assert checked == set(services) - {"migrate"}
    tests = {name: " ".join(services[name]["healthcheck"]["test"][1:]) for name in checked}
    assert tests["redis"] == "redis-cli ping"
    for worker in ("worker", "work"):
        assert tests[worker].startswith("celery -A cronchain.tasks inspect ping")
        assert tests[worker].endswith("-d celery@$$HOSTNAME")  # $$: compose's escape
    beat = services["beat"]["healthcheck"]["test"]
    assert beat[1:4] == ["cronchain", "health", "--check"] and beat[4] in CHECKS
    assert "/healthcheck" in tests["flower"] and "/metrics" in tests["web"]
    web = services["web"]
    assert web["environment"]["CRONCHAIN_WEB_BASIC_AUTH"].startswith("${CRONCHAIN_WEB_BASIC_AUTH:?")
    for name in ("CRONCHAIN_DATABASE_URL", "CRONCHAIN_BROKER_URL"):  # the others' settings
        assert web["environment"][name] == services["worker"]["environment"][name]
    assert web["ports"] == ["8080:8080"]


def test_the_image_runs_as_a_user_and_caches_its_dependencies():
    """The Dockerfile, read (no Docker engine here): dependencies installed from
    pyproject.toml alone before the source is copied (a change of code rebuilds one
    layer), and the processes run as a user other than root. The command that lists the
    dependencies is run here on the real pyproject.toml."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    steps = [line.split()[0] for line in lines if line and not line.startswith((" ", "#"))]
    copies = [line for line in lines if line.startswith("COPY")]
    assert copies == ["COPY pyproject.toml ./", "COPY . ."]
    assert lines.index(copies[0]) < lines.index(copies[1])
    install = next(line for line in lines if "tomllib" in line)
    assert lines.index(copies[0]) < lines.index(install) < lines.index(copies[1])
    user = next(line for line in lines if line.startswith("USER"))
    assert user.split()[1] not in ("root", "0") and steps.index("USER") < steps.index("CMD")
    listing = install.split('python -c "', 1)[1].split('" >', 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", listing], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "celery[redis]>=5.4" in done.stdout.splitlines()


def test_the_deployment_runs_no_demo_job():
    """The folder beat applies in docker-compose holds no job that fails on purpose
    (examples/demo.yaml's ``flaky``, which ``make run`` shows)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    [mount] = services["beat"]["volumes"]
    folder = ROOT / mount.split(":")[0]
    assert folder != ROOT / "examples" and folder.is_dir()
    for path in folder.glob("*.yaml"):
        for job in yaml.safe_load(path.read_text())["jobs"]:
            assert not job.get("noop", {}).get("fail"), (path, job["name"])


def test_make_run_installs_no_dev_extras():
    text = (ROOT / "Makefile").read_text()
    run_recipe = text.split("$(VENV)/.run: pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    assert "-e ." in run_recipe and "[dev]" not in run_recipe
    assert "\nrun: $(VENV)/.run\n" in text and "\ntest: $(VENV)/.dev\n" in text
