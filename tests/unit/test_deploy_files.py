"""The deploy files of examples/deploy (systemd units, Kubernetes manifests) agree with the
code: their YAML parses, each ``cronchain`` command parses with cronchain's own CLI
parser, each ``CRONCHAIN_*`` variable they set is one cronchain reads, and their Celery
commands are the ones ``cronchain up`` runs, split apart: its control worker less
``--beat``, beat on its own, its work worker (scheduler/cli/up.py builds them; this test
runs ``up`` with its processes, database and broker replaced, and compares the argument
lists). Where ``systemd-analyze`` is on the PATH, the units also pass ``systemd-analyze
verify``; without it that one check is skipped, and says so. No service is needed."""

from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from cronchain.scheduler.cli import up as up_module
from cronchain.scheduler.cli.main import _parser
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.spec.channels import ENV as CHANNELS_ENV
from cronchain.scheduler.spec.channels import SMTP_ENV
from cronchain.scheduler.spec.jobspec import parse_job_file
from cronchain.scheduler.web.app import OPEN_PATHS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "deploy"
UNITS = DEPLOY / "systemd"
MANIFESTS = DEPLOY / "kubernetes"
# Where the units expect cronchain's virtualenv; systemd-analyze is pointed at this one.
UNIT_BIN = "/opt/cronchain/venv/bin/"
# What Celery expands to the machine's (the pod's) name in --hostname: what up writes.
CELERY_HOST = "%h"


# --- what the files hold ---------------------------------------------------------------


def unit_files() -> list[Path]:
    return sorted(UNITS.glob("*.service"))


def unit_commands() -> dict[str, list[str]]:
    """Each unit's ExecStart as an argument list, the program named by its file name
    (``celery``, ``cronchain``). systemd reads ``%%`` as ``%`` and any other ``%x`` as
    one of its specifiers (``%h`` is a home folder): the units use none."""
    commands = {}
    for path in unit_files():
        [line] = [x for x in path.read_text().splitlines() if x.startswith("ExecStart=")]
        text = line.removeprefix("ExecStart=").replace("%%", "\0")
        assert "%" not in text, f"{path.name}: a systemd specifier in {line!r}"
        argv = shlex.split(text.replace("\0", "%"))
        assert argv[0].startswith(UNIT_BIN), (path.name, argv[0])
        commands[path.name] = [Path(argv[0]).name, *argv[1:]]
    return commands


def env_file() -> dict[str, str]:
    """The variables cronchain.env sets (comments and blank lines aside)."""
    found = {}
    for line in (UNITS / "cronchain.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, equals, value = line.partition("=")
            assert equals, line
            found[name.strip()] = value.strip()
    return found


def documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted([*MANIFESTS.glob("*.yaml"), *MANIFESTS.glob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path, doc


def containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every container of every Deployment and Job, named ``kind/name/container``."""
    for _, doc in documents():
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            for c in [*pod.get("initContainers", []), *pod["containers"]]:
                yield f"{doc['kind']}/{doc['metadata']['name']}/{c['name']}", c


def manifest_commands() -> dict[str, list[str]]:
    return {name: [*c.get("command", []), *c.get("args", [])] for name, c in containers()}


def manifest_env() -> dict[str, str]:
    """What the ConfigMaps and Secrets give as variables, and what containers set."""
    found: dict[str, str] = {}
    for _, doc in documents():
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] != "cronchain-jobs":
            found |= doc.get("data", {})
        elif doc["kind"] == "Secret":
            found |= doc.get("stringData", {})
    for _, container in containers():
        found |= {e["name"]: e.get("value", "") for e in container.get("env", [])}
    return found


def variables_cronchain_reads() -> set[str]:
    """The ``CRONCHAIN_*`` names scheduler/settings.py holds as string constants, and the
    two of alert channels (scheduler/spec/channels.py)."""
    tree = ast.parse((ROOT / "scheduler" / "settings.py").read_text())
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("CRONCHAIN_")
    }
    return names | {CHANNELS_ENV, SMTP_ENV}


# --- what cronchain up runs --------------------------------------------------------------


def commands_of_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]
) -> dict[str, list[str]]:
    """The commands ``cronchain up`` (its defaults, under ``env``'s settings) would start,
    taken from ``up`` itself: its database, migration and supervisor replaced, nothing
    started. Its interpreter is written ``celery``, its host name as Celery's ``%h``."""
    settings = Settings.from_env(env | {"CRONCHAIN_HOME": str(tmp_path)})
    runtime = SimpleNamespace(settings=settings, engine=None, unsent=None)

    class Scheduler:
        def __init__(self, engine: object):
            pass

        def upgrade(self) -> None:
            pass

    taken: dict[str, list[str]] = {}

    def supervise(commands: dict[str, list[str]], **_: object) -> int:
        taken.update({name: list(argv) for name, argv in commands.items()})
        return 0

    monkeypatch.setattr("cronchain.scheduler.api.Scheduler", Scheduler)
    monkeypatch.setattr("cronchain.scheduler.cli.supervise.supervise", supervise)
    monkeypatch.setattr(
        "cronchain.scheduler.workers.runtime.Runtime",
        SimpleNamespace(for_command=lambda: runtime),
    )
    monkeypatch.setenv(up_module.STARTED_BY_UP, "")  # up sets it; restored after the test
    monkeypatch.setattr(up_module.socket, "gethostname", lambda: "HOST")
    args = _parser().parse_args(["up"])
    status = up_module.up(
        args.files,
        concurrency=args.concurrency,
        queues=args.queues,
        work_concurrency=args.work_concurrency,
        loglevel=args.loglevel,
    )
    assert status == 0 and set(taken) == {"control", "work"}
    interpreter = [sys.executable, "-m", "celery"]
    found = {}
    for name, argv in taken.items():
        assert argv[:3] == interpreter, argv
        found[name] = ["celery", *(a.replace("@HOST", "@" + CELERY_HOST) for a in argv[3:])]
    return found


def split_like_production(up_commands: dict[str, list[str]]) -> dict[str, list[str]]:
    """up's control worker runs beat inside (``--beat``): in production beat is a process
    of its own, with the same app, options and log level."""
    control, work = up_commands["control"], up_commands["work"]
    assert control.count("--beat") == 1, "up no longer embeds beat: revisit the deploy files"
    options = control[: control.index("worker")]  # celery -A cronchain.tasks [--quiet]
    loglevel = control[control.index("--loglevel") + 1]
    return {
        "control": [a for a in control if a != "--beat"],
        "work": work,
        "beat": [*options, "beat", "--loglevel", loglevel],
    }


# --- the tests ------------------------------------------------------------------------


def test_the_deploy_files_are_there():
    names = {p.name for p in unit_files()}
    assert {
        "cronchain-control.service",
        "cronchain-work.service",
        "cronchain-beat.service",
        "cronchain-web.service",
    } <= names
    assert (UNITS / "cronchain.env").is_file()
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in documents()}
    for deployment in ("cronchain-control", "cronchain-work", "cronchain-beat", "cronchain-web"):
        assert ("Deployment", deployment) in kinds
    assert ("Job", "cronchain-db-upgrade") in kinds
    assert {"Secret", "ConfigMap"} <= {kind for kind, _ in kinds}


def test_every_yaml_parses():
    paths = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
    assert paths
    for path in paths:
        assert list(yaml.safe_load_all(path.read_text())), path


def test_every_cronchain_command_parses_with_cronchains_parser():
    commands = [
        argv
        for argv in [*unit_commands().values(), *manifest_commands().values()]
        if argv[0] == "cronchain"
    ]
    assert {tuple(argv[1:3]) for argv in commands} >= {("serve", "--host"), ("db", "upgrade")}
    for argv in commands:
        try:
            _parser().parse_args(argv[1:])
        except SystemExit as exit:  # argparse refused it
            pytest.fail(f"cronchain refuses {shlex.join(argv)} (exit status {exit.code})")


def test_every_variable_set_is_one_cronchain_reads():
    known = variables_cronchain_reads()
    assert {"CRONCHAIN_DATABASE_URL", "CRONCHAIN_BROKER_URL", "CRONCHAIN_QUEUE"} <= known
    for where, env in (("cronchain.env", env_file()), ("kubernetes", manifest_env())):
        assert env, where
        unknown = sorted(set(env) - known)
        assert not unknown, f"{where} sets variables cronchain does not read: {unknown}"
        Settings.from_env(env)  # and cronchain takes their values (ConfigError otherwise)


@pytest.mark.parametrize("where", ["systemd", "kubernetes"])
def test_the_celery_commands_are_those_cronchain_up_runs(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """The same argument lists, under the settings the files give (queues, threads), so
    that a change of up.py's commands, or of a queue's name, fails here until the deploy
    files follow."""
    env = env_file() if where == "systemd" else manifest_env()
    expected = split_like_production(commands_of_up(monkeypatch, tmp_path, env))
    settings = Settings.from_env(env)
    found = unit_commands() if where == "systemd" else manifest_commands()
    celery = {name: argv for name, argv in found.items() if argv[0] == "celery"}
    for name, argv in celery.items():
        assert argv in expected.values(), f"{name} runs {shlex.join(argv)}"
    assert sorted(map(tuple, celery.values())) == sorted(map(tuple, expected.values()))
    queues = {argv[argv.index("--queues") + 1] for argv in celery.values() if "--queues" in argv}
    assert queues == {settings.queue, settings.work_queue}
    work = expected["work"]
    assert work[work.index("--concurrency") + 1] == str(settings.work_concurrency)


def test_kubernetes_runs_one_beat_and_probes_the_web_servers_open_paths():
    deployments = {
        doc["metadata"]["name"]: doc for _, doc in documents() if doc["kind"] == "Deployment"
    }
    beat = deployments["cronchain-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    [web] = deployments["cronchain-web"]["spec"]["template"]["spec"]["containers"]
    port = int(web["command"][web["command"].index("--port") + 1])
    probes = {kind: web[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/livez"
    assert probes["readinessProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert probe["path"] in OPEN_PATHS and probe["port"] == port  # no credentials asked


def test_the_job_files_the_manifests_mount_are_valid():
    [jobs] = [doc for _, doc in documents() if doc["metadata"]["name"] == "cronchain-jobs"]
    for name, text in jobs["data"].items():
        assert name.endswith((".yaml", ".yml")), name
        assert parse_job_file(yaml.safe_load(text)).jobs, name


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path):
    """Each unit as written, its programs looked for in this test's virtualenv (the
    units' /opt/cronchain/venv/bin is not on this machine); any warning fails too."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not on the PATH: the units were not verified")
    here = str(Path(sys.executable).parent) + "/"
    assert (Path(here) / "celery").exists() and (Path(here) / "cronchain").exists()
    copies = []
    for path in unit_files():
        copy = tmp_path / path.name
        copy.write_text(path.read_text().replace(UNIT_BIN, here))
        copies.append(str(copy))
    done = subprocess.run(
        [analyze, "verify", "--man=no", *copies], capture_output=True, text=True, timeout=60
    )
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and not said, said
