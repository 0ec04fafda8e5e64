"""The manual's Prometheus configuration and alert rules (docs/how-to/prometheus.md),
read by a real Prometheus's ``promtool`` (Debian's ``prometheus`` package): the scrape
config and the rules are valid, and each alert fires on the series cronchain writes
(``promtool test rules``), with the label names it writes (``job_name``, never ``job``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.repo import manual_block

PROMTOOL = shutil.which("promtool")


@pytest.fixture
def promtool() -> str:
    if PROMTOOL is None:
        from tests.support.services import unavailable

        unavailable("promtool (apt-get install prometheus)")
    assert PROMTOOL is not None
    return PROMTOOL


def run(promtool: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_readme_scrape_config_is_valid(promtool: str, tmp_path: Path):
    (tmp_path / "prometheus.yml").write_text(manual_block("# prometheus.yml"))
    run(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)


# For each alert of the manual: series as cronchain writes them (``series`` in promtool's
# notation, one sample a minute), and the alert it must raise, and when.
RULE_TESTS = {
    "CronchainJobStale": {
        "input_series": [
            {  # succeeded at time 0 (Unix 0 in promtool's clock), never again
                "series": 'cronchain_job_last_success_timestamp_seconds{instance="web:8080",'
                'job="cronchain",job_name="features",project="etl"}',
                "values": "0+0x1700",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "25h", "alertname": "CronchainJobStale", "exp_alerts": []},
            {
                "eval_time": "27h",
                "alertname": "CronchainJobStale",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "page",
                            "instance": "web:8080",
                            "job": "cronchain",
                            "job_name": "features",
                            "project": "etl",
                        },
                        "exp_annotations": {"summary": "etl/features: no success for 26 h"},
                    }
                ],
            },
        ],
    },
    "CronchainJobFailing": {
        "input_series": [
            {  # no failure for 30 minutes, then one
                "series": 'cronchain_job_failures_total{instance="web:8080",job="cronchain",'
                'job_name="retrain",project="ml"}',
                "values": "0x30 1x30",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "CronchainJobFailing", "exp_alerts": []},
            {
                "eval_time": "40m",
                "alertname": "CronchainJobFailing",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "ticket",
                            "instance": "web:8080",
                            "job": "cronchain",
                            "job_name": "retrain",
                            "project": "ml",
                        },
                        "exp_annotations": {"summary": "ml/retrain: a run failed"},
                    }
                ],
            },
        ],
    },
    "CronchainWatchdogDown": {
        "input_series": [
            {  # passes every minute for 10 minutes, then none
                "series": 'cronchain_watchdog_last_pass_timestamp_seconds{instance="web:8080",'
                'job="cronchain"}',
                "values": "0+60x10 600x20",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "CronchainWatchdogDown", "exp_alerts": []},
            {
                "eval_time": "16m",
                "alertname": "CronchainWatchdogDown",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "page",
                            "instance": "web:8080",
                            "job": "cronchain",
                        },
                        "exp_annotations": {
                            "summary": "the watchdog has not passed for 5 minutes: is beat running?"
                        },
                    }
                ],
            },
        ],
    },
}


def test_the_readme_alert_rules_are_valid_and_each_fires_when_it_should(
    promtool: str, tmp_path: Path
):
    rules = yaml.safe_load(manual_block("# alert rules"))
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    assert sorted(names) == sorted(RULE_TESTS)  # a test for every alert the manual gives
    (tmp_path / "rules.yml").write_text(manual_block("# alert rules"))
    run(promtool, "check", "rules", "rules.yml", cwd=tmp_path)
    tests = [{"interval": "1m", **case} for case in RULE_TESTS.values()]
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "tests": tests})
    )
    out = run(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert "SUCCESS" in out
