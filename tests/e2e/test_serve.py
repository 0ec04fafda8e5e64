"""``cronchain serve`` as an operator runs it: a real process on PostgreSQL and a private
Redis, asked over HTTP. Unhealthy (503, and ``cronchain health`` exits 1) with no worker
and no beat, healthy once they run; /metrics parsed as Prometheus parses it; the pages
ask for credentials when they are set; and no listening beyond loopback without them."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import WATCHDOG_INTERVAL, Cluster
from tests.support.cli import Cli
from tests.support.repo import ROOT, manual_block
from tests.support.services import free_port, unavailable
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
CREDENTIALS = "admin:s3cret"
JOBS = "project: web\njobs:\n" + "".join(
    f"  - name: j{i}\n    schedule: every 1s\n    noop: {{}}\n" for i in range(3)
)


def get(url: str, auth: str | None = None) -> tuple[int, str]:
    """Status and body of a GET, whatever the status."""
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def metrics(base: str) -> dict[tuple[str, tuple[Any, ...]], float]:
    status, text = get(f"{base}/metrics")
    assert status == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def health(cli: Cli) -> tuple[int, dict[str, Any]]:
    done = cli("health", "--json", code=None)
    return done.returncode, json.loads(done.stdout)


def test_serve_is_unhealthy_without_workers_and_healthy_with_them(cluster: Cluster, cli: Cli):
    cli("db", "upgrade")
    (cluster.folder / "jobs.yaml").write_text(JOBS)
    cli("apply", "jobs.yaml")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cluster.start(
        "serve",
        *(sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--port", str(port)),
        *("--basic-auth", CREDENTIALS),
    )
    status, body = wait_until(lambda: (r := get(f"{base}/healthz"))[0] and r, 30, "serve")
    assert status == 503, body
    assert {"watchdog", "control_path", "work_path"} <= set(json.loads(body)["failed"])
    code, report = health(cli)
    assert code == 1 and not report["checks"]["work_path"]["ok"], report
    assert "no worker consumes queue cronchain.work" in report["checks"]["work_path"]["detail"]

    found = metrics(base)
    for i in range(3):
        job = (("job_name", f"j{i}"), ("project", "web"))
        assert found["cronchain_job_last_success_timestamp_seconds", job] == 0
        assert found["cronchain_job_state", (*job, ("state", "SCHEDULED"))] == 1
        assert found["cronchain_job_next_tick_timestamp_seconds", job] > 0
    assert found["cronchain_watchdog_last_pass_timestamp_seconds", ()] == 0

    assert get(f"{base}/")[0] == 401  # the page asks; /metrics and /healthz did not
    assert get(f"{base}/livez") == (200, '{"ok":true}\n')  # asks nothing, however unwell
    assert get(f"{base}/", "admin:wrong")[0] == 401
    status, page = get(f"{base}/", CREDENTIALS)
    assert status == 200 and "web/j2" in page

    cluster.start_worker()
    cluster.start_work_worker()
    cluster.start_beat()
    status, body = wait_until(lambda: (r := get(f"{base}/healthz"))[0] == 200 and r, 60, "health")
    assert json.loads(body)["ok"]
    assert health(cli)[0] == 0
    found = metrics(base)
    assert found["cronchain_watchdog_last_pass_timestamp_seconds", ()] > 0
    succeeded = [
        v for (name, _), v in found.items() if name.startswith("cronchain_job_last_success")
    ]
    assert len(succeeded) == 3 and all(v > 0 for v in succeeded)

    # Beat stopped for two watchdog intervals: health fails and names the watchdog;
    # back, it passes again.
    cluster.kill("beat")
    code, report = wait_until(
        lambda: (r := health(cli))[0] == 1 and r, 4 * WATCHDOG_INTERVAL, "health to fail"
    )
    assert report["failed"] == ["watchdog"], report
    assert "is beat running" in report["checks"]["watchdog"]["detail"], report
    cluster.start_beat()
    wait_until(lambda: health(cli)[0] == 0, 60, "health to pass again")


def test_serve_refuses_other_addresses_without_credentials(tmp_path: Path):
    """Checked before anything connects: no database or broker is needed to refuse."""
    done = subprocess.run(
        [sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--host", "0.0.0.0"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CRONCHAIN_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("cronchain: --host: 0.0.0.0 is not a loopback address")
    assert "--basic-auth" in done.stderr and "CRONCHAIN_WEB_BASIC_AUTH" in done.stderr


def test_a_real_prometheus_scrapes_serve_and_keeps_the_job_s_labels(
    cluster: Cluster, tmp_path: Path
):
    """Prometheus (Debian's) scrapes ``cronchain serve`` as docs/how-to/prometheus.md
    configures it; its query API returns each job's series with ``job_name`` as
    cronchain wrote it, beside the scrape's own ``job``, and no ``exported_job``."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        unavailable("prometheus (apt-get install prometheus)")
    cluster.cronchain("db", "upgrade")
    (cluster.folder / "jobs.yaml").write_text(JOBS)
    cluster.cronchain("apply", "jobs.yaml")
    port, prom_port = free_port(), free_port()
    cluster.start(
        "serve", sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--port", str(port)
    )
    config = yaml.safe_load(manual_block("# prometheus.yml"))
    config["global"] = {"scrape_interval": "1s"}
    config["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    cluster.start(
        "prometheus",
        prometheus,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
    )
    query = urllib.parse.quote('cronchain_job_state{state="SCHEDULED"} == 1')
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?query={query}"

    def scraped() -> list[dict[str, Any]] | None:
        status, body = get(url)
        found = json.loads(body)["data"]["result"] if status == 200 else []
        return found if len(found) == 3 else None

    series = wait_until(scraped, 60, "Prometheus to scrape the jobs' states")
    labels = sorted((s["metric"] for s in series), key=lambda m: m["job_name"])
    assert [m["job_name"] for m in labels] == ["j0", "j1", "j2"]
    for metric in labels:
        assert metric["job"] == "cronchain" and metric["project"] == "web"
        assert "exported_job" not in metric
    status, body = get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=cronchain_build_info")
    [build] = json.loads(body)["data"]["result"]
    assert build["metric"]["version"] and build["value"][1] == "1"
