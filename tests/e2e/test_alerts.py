"""Alerts end to end: real worker and beat processes, a real SMTP server and a real
webhook receiver, a work-path worker killed in the middle of a delivery."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from cronchain.scheduler.storage.models import alerts, invocations
from tests.e2e.harness import Cluster, database
from tests.support.jobs import alerting_job_file
from tests.support.receivers import smtp_server, webhook
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]
# The job file: a run the killed worker had claimed lapses in 5 s (its lease), not in a
# minute; alerts go to the webhook and by mail.
WATCHED = {"project": "watched", "schedule": "every 2s", "lease": "5s", "mail": True}


def test_one_alert_per_failed_slot_through_a_killed_worker_and_two_beats(
    cluster: Cluster, pg_url: str, tmp_path: Path
):
    db = database(pg_url)
    with webhook() as hook, smtp_server() as box:
        hold = hook.hold = threading.Event()  # the first delivery waits until its worker dies
        cluster.env |= {
            "TEST_HOOK_URL": hook.url,
            "TEST_SMTP_URL": box.url,
            "CRONCHAIN_ALERT_TIMEOUT": "3",
        }
        cluster.cronchain("db", "upgrade")
        cluster.cronchain(
            "apply", str(alerting_job_file(tmp_path / "jobs.yaml", fail=True, **WATCHED))
        )
        cluster.start_worker()
        cluster.start_work_worker()
        cluster.start_beat("beat")
        cluster.start_beat("beat2")
        assert hook.held.wait(60), "no alert reached the webhook"
        cluster.kill("work")  # mid-delivery: the webhook has it, cronchain has not recorded it
        hold.set()
        cluster.start_work_worker("work2")

        def failed_slots() -> int:
            with db.connect() as conn:
                query = select(invocations.c.id).where(invocations.c.status == "FAILED")
                return len(conn.execute(query).all())

        wait_until(lambda: failed_slots() >= 4, 60, "four failed slots")
        cluster.cronchain(
            "apply", str(alerting_job_file(tmp_path / "jobs.yaml", fail=False, **WATCHED))
        )

        def raised() -> list[dict]:
            with db.connect() as conn:
                return [
                    dict(r._mapping) for r in conn.execute(select(alerts).order_by(alerts.c.id))
                ]

        def all_sent() -> bool:
            rows = raised()
            return any(r["event"] == "recovered" for r in rows) and all(
                r["state"] == "sent" for r in rows
            )

        wait_until(all_sent, 90, "every alert sent, a recovered among them")
        rows = raised()
        failed = failed_slots()
        events = Counter(r["event"] for r in rows)
        assert events == {"failed": failed, "recovered": 1}, (events, failed)
        assert len({r["invocation_id"] for r in rows if r["event"] == "failed"}) == failed
        # Each alert reached each channel; the one whose worker died reached the webhook
        # twice under one idempotency key, and nothing else came twice.
        keys = Counter(hook.keys())
        assert len(keys) == len(rows) and sum(keys.values()) == len(rows) + 1
        assert keys[hook.keys()[0]] == 2  # the delivery the kill interrupted, repeated
        assert {k.rsplit("/", 1)[1] for k in keys} == {"failed", "recovered"}
        mail_keys = Counter(m["Idempotency-Key"].strip() for m in box.mails)
        assert set(mail_keys) == set(keys) and max(mail_keys.values()) == 1
        alerts_listed = cluster.cronchain("alerts", "watched/flaky", "--json")
        assert alerts_listed.count('"state": "sent"') == len(rows)
    db.dispose()
