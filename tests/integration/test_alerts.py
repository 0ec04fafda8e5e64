"""Alerts on real databases with a real webhook and a real SMTP server: one per
(job, slot, event), delivered once, retried with backoff, given up and reported."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronchain.scheduler.alerts import delivery
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.settings import AlertDelivery
from cronchain.scheduler.spec.jobspec import load_job_file
from cronchain.scheduler.storage import alert_store
from tests.support.deliver import deliver_runs, deliver_ticks_and_starts
from tests.support.engine import Clock, RecordingPort
from tests.support.jobs import alerting_job_file
from tests.support.receivers import smtp_server, webhook
from tests.support.rows import alert_rows

pytestmark = pytest.mark.postgres
QUICK = AlertDelivery(timeout=2.0, attempts=3)


@pytest.fixture(autouse=True)
def no_cool_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test calls its channels every time, unless it says otherwise."""
    monkeypatch.setattr(delivery, "COOL_DOWN", 0.0)
    monkeypatch.setattr(delivery, "_cooling", {})


def deliver_alerts(engine: Engine, port: RecordingPort) -> list[str | None]:
    """What a work-path worker does with each ``cronchain.alert`` message sent so far."""
    sent, port.alerts[:] = list(port.alerts), []
    return [delivery.deliver(engine, alert_id, QUICK) for alert_id, _eta in sent]


def fire(engine: Engine, port: RecordingPort, clock: Clock) -> None:
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)
    deliver_runs(engine, port)


def test_one_alert_per_failed_slot_and_one_recovered(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    with webhook() as hook:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True))
        fire(engine, port, clock)
        fire(engine, port, clock)
        assert deliver_alerts(engine, port) == ["sent", "sent"]
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=False))
        fire(engine, port, clock)
        fire(engine, port, clock)  # a second success: nothing to recover from
        assert deliver_alerts(engine, port) == ["sent"]
        events = [body["event"] for _, body in hook.posts]
        assert events == ["failed", "failed", "recovered"]
        assert len(set(hook.keys())) == 3
        assert hook.posts[0][1]["detail"] == "noop: fail is set"
        # Each alert is delivered once: its message again, or the watchdog, sends nothing.
        for row in alert_rows(engine):
            assert delivery.deliver(engine, row["id"], QUICK) is None
            assert row["state"] == "sent" and list(row["delivered"]) == ["hook"]
        clock.advance(3600)
        watchdog.run_once(engine)
        assert port.alerts == [] and len(hook.posts) == 3


def test_a_failing_channel_is_retried_with_backoff_given_up_and_reported(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    with webhook() as hook:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        hook.answers = [500, 503, 500]
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True))
        fire(engine, port, clock)
        ((alert_id, _),) = port.alerts
        assert deliver_alerts(engine, port) == ["pending"]
        ((again, eta),) = port.alerts
        assert again == alert_id and eta is not None
        assert timedelta(seconds=9) <= eta - clock.now <= timedelta(seconds=11)  # 10 s, ±10%
        assert deliver_alerts(engine, port) == [None]  # early: not due yet
        port.alerts.append((alert_id, eta))
        clock.advance(11)
        assert deliver_alerts(engine, port) == ["pending"]
        clock.advance(22)
        assert deliver_alerts(engine, port) == ["failed"]
        (row,) = alert_rows(engine)
        assert row["attempts"] == 3 and row["delivered"] == {}
        assert row["errors"] == {"hook": "the webhook answered HTTP 500"}
        with engine.db.connect() as conn:
            failing = alert_store.failing_channels(conn, clock.now.replace(hour=0), 3)
        assert failing == {"hook": "the webhook answered HTTP 500"}
        assert len(hook.posts) == 3 and len(set(hook.keys())) == 1  # one key throughout


def test_secrets_stay_out_of_errors(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path, monkeypatch
):
    monkeypatch.setenv("TEST_HOOK_URL", "http://127.0.0.1:9/hook?token=SECRET-TOKEN")
    Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True))
    fire(engine, port, clock)
    assert deliver_alerts(engine, port) == ["pending"]
    (row,) = alert_rows(engine)
    assert "SECRET" not in repr(row) and "the webhook did not answer" in row["errors"]["hook"]


def test_mail_and_slack(engine: Engine, port: RecordingPort, clock: Clock, tmp_path, monkeypatch):
    with webhook() as hook, smtp_server() as box:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        monkeypatch.setenv("TEST_SMTP_URL", box.url)
        extra = """  slack: {webhook: {env: TEST_HOOK_URL}, format: slack}
  mail: {email: [oncall@example.com], from: cronchain@example.com, smtp: {env: TEST_SMTP_URL}}"""
        path = alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[retries_exhausted]")
        text = path.read_text().replace("to: [hook]", "to: [slack, mail]")
        path.write_text(text.replace("channels:\n", "channels:\n" + extra + "\n"))
        Scheduler(engine).apply(path)
        fire(engine, port, clock)
        assert deliver_alerts(engine, port) == ["sent"]
        (mail,) = box.mails
        assert mail["To"] == "oncall@example.com"
        assert mail["Subject"].startswith("cronchain: p/flaky 2026-03-01T12:00:10+00:00")
        assert mail["Idempotency-Key"].strip() == hook.posts[0][0]["Idempotency-Key"]
        assert hook.posts[0][1]["mrkdwn"] is False and set(hook.posts[0][1]) == {"text", "mrkdwn"}


def test_late_start_and_running_longer_by_the_watchdog(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    monkeypatch.setenv("TEST_HOOK_URL", "http://127.0.0.1:9/")
    path = alerting_job_file(
        tmp_path / "jobs.yaml", fail=False, on="[late_start>30s, running_longer>1m]"
    )
    Scheduler(engine).apply(path)
    clock.advance(10)
    deliver_ticks_and_starts(engine, port)  # started, never claimed: no worker
    clock.advance(31)
    watchdog.run_once(engine)
    watchdog.run_once(engine)  # a second watchdog: the same alert
    assert [r["event"] for r in alert_rows(engine)] == ["late_start>30s"]
    call = port.runs[-1]  # sent again by the watchdog: either copy claims it
    assert engine.attempts.claim(call.invocation_id, call.attempt, "w") is not None
    clock.advance(61)
    watchdog.run_once(engine)
    assert [r["event"] for r in alert_rows(engine)] == ["late_start>30s", "running_longer>60s"]


def test_the_spec_refuses_what_cannot_be_sent(tmp_path: Path):
    cases = {
        "[failed, boom]": "'boom' is not one of",
        "[recovered]": "recovered follows failed or retries_exhausted",
        "[late_start]": "late_start needs a threshold",
    }
    for on, message in cases.items():
        with pytest.raises(SpecError, match="alerts.on") as err:
            load_job_file(alerting_job_file(tmp_path / "jobs.yaml", fail=False, on=on))
        assert message in str(err.value) and "job 'flaky'" in str(err.value)
    path = alerting_job_file(tmp_path / "jobs.yaml", fail=False)
    path.write_text(path.read_text().replace("to: [hook]", "to: [nowhere]"))
    with pytest.raises(SpecError, match="no channel named 'nowhere'"):
        load_job_file(path)


def test_skips_alert_in_a_tick_batch_and_explain_and_health_say_so(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    """A herd's tick batch raises the alert of a skip it writes (``Runs.skipped``); a
    pause's skips raise none; explain names the alert; health names a channel that
    gave up."""
    monkeypatch.setenv("TEST_HOOK_URL", "http://127.0.0.1:9/")
    path = alerting_job_file(tmp_path / "jobs.yaml", fail=False, on="[skipped]")
    text = path.read_text()
    path.write_text(text + text[text.index("  - name: flaky") :].replace("flaky", "quiet"))
    Scheduler(engine).apply(path)
    for _ in range(2):  # the first runs are never claimed: the next slots overlap them
        clock.advance(10)
        ticks, port.ticks[:] = [(j, n) for j, n, _ in port.ticks], []
        engine.tick_many(ticks, start_here=True)
    skipped = [r for r in alert_rows(engine) if r["event"] == "skipped"]
    assert len(skipped) == 2 and {r["detail"] for r in skipped} == {"skipped (overlap)"}
    explained = Scheduler(engine).explain("p/flaky", clock.now)
    assert (
        explained["answer"] == "skipped"
        and "raised the alert(s) skipped (pending: hook not yet)" in (explained["text"])
    )
    assert [a["event"] for a in explained["alerts"]] == ["skipped"]
    Scheduler(engine).pause("p/flaky")
    clock.advance(60)
    Scheduler(engine).resume("p/flaky")  # five slots recorded SKIPPED (paused): no alert
    assert len(alert_rows(engine)) == 2
    listed = Scheduler(engine).alerts("p/quiet")
    assert [(a["job"], a["event"], a["state"]) for a in listed] == [
        ("p/quiet", "skipped", "pending")
    ]
    for state in ("pending", "pending", "failed"):  # QUICK gives up after 3 deliveries
        clock.advance(1000)
        port.alerts[:] = [(alert["id"], None) for alert in alert_rows(engine)]
        assert deliver_alerts(engine, port) == [state, state]
    with engine.db.connect() as conn:
        failing = alert_store.failing_channels(conn, clock.now - timedelta(days=1), 3)
    assert set(failing) == {"hook"} and "did not answer" in failing["hook"]


def test_a_retry_waiting_is_not_a_late_start(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    """Attempt 1 was claimed on time and failed; its retry waits out a backoff longer
    than ``late_start``: the watchdog raises nothing."""
    monkeypatch.setenv("TEST_HOOK_URL", "http://127.0.0.1:9/")
    path = alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[late_start>30s]")
    path.write_text(
        path.read_text().replace(
            "    alerts:", "    retries: {max_attempts: 2, backoff: 5m}\n    alerts:"
        )
    )
    Scheduler(engine).apply(path)
    fire(engine, port, clock)
    clock.advance(60)
    watchdog.run_once(engine)
    assert alert_rows(engine) == []


def test_a_delivery_that_lost_its_lease_changes_nothing(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    """A slow delivery (A) outlives its lease and a second one (B) takes the alert and
    sends it: A's late results neither undo B's nor send again."""
    with webhook() as hook:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[failed]"))
        fire(engine, port, clock)
        ((alert_id, _),) = port.alerts
        lease = timedelta(seconds=10)
        with engine.transaction() as conn:
            a = alert_store.claim(conn, alert_id, clock.now, lease)
        clock.advance(11)
        assert deliver_alerts(engine, port) == ["sent"]  # B
        with engine.transaction() as conn:
            assert a is not None and not alert_store.renew(conn, alert_id, a.attempts, clock.now)
            alert_store.failed_to(conn, alert_id, a.attempts, "hook", "A's late error")
            assert (
                alert_store.settle(
                    conn, alert_id, a.attempts, give_up=True, retry_at=clock.now, now=clock.now
                )
                is None
            )
        (row,) = alert_rows(engine)
        assert row["state"] == "sent" and row["errors"] == {} and len(hook.posts) == 1


def test_errors_a_library_words_never_quote_the_secret(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    for url in ("hooks.example.com/services/T0/SECRET", "http://127.0.0.1:99999/SECRET"):
        monkeypatch.setenv("TEST_HOOK_URL", url)
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[failed]"))
        fire(engine, port, clock)
        assert deliver_alerts(engine, port)[-1] == "pending"
        port.alerts.clear()  # the retry: not needed here
    alerts_rows = alert_rows(engine)
    assert len(alerts_rows) == 2 and "SECRET" not in repr(alerts_rows)
    assert all(r["errors"]["hook"].startswith("the webhook did not answer") for r in alerts_rows)


def test_a_channel_that_took_an_alert_since_is_not_failing(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    with webhook() as hook:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        hook.answers = [500]
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[failed]"))
        fire(engine, port, clock)
        assert deliver_alerts(engine, port) == ["pending"]
        port.alerts.clear()

        def failing() -> dict[str, str]:
            with engine.db.connect() as conn:
                return alert_store.failing_channels(conn, clock.now - timedelta(days=1), 1)

        assert set(failing()) == {"hook"}
        fire(engine, port, clock)
        assert deliver_alerts(engine, port) == ["sent"]  # the next slot's alert went out
        assert failing() == {}


def test_a_channel_that_just_failed_is_not_called_again_for_a_while(
    engine: Engine, port: RecordingPort, clock: Clock, tmp_path: Path, monkeypatch: Any
):
    """A dead webhook holds a work-path thread for its timeout: after one failure, this
    process leaves the channel alone for ``COOL_DOWN``; the alerts wait for their retry."""
    monkeypatch.setattr(delivery, "COOL_DOWN", 30.0)
    with webhook() as hook:
        monkeypatch.setenv("TEST_HOOK_URL", hook.url)
        hook.answers = [500]
        Scheduler(engine).apply(alerting_job_file(tmp_path / "jobs.yaml", fail=True, on="[failed]"))
        fire(engine, port, clock)
        fire(engine, port, clock)
        assert deliver_alerts(engine, port) == ["pending", "pending"]
        assert len(hook.posts) == 1  # the second alert did not call it
        second = alert_rows(engine)[1]
        assert second["attempts"] == 0  # and that was not a try
        assert second["errors"]["hook"] == (
            "not called: it failed less than 30 s ago (the webhook answered HTTP 500)"
        )
        monkeypatch.setattr(delivery, "_cooling", {})  # the cool-down is over
        clock.advance(3600)
        port.alerts[:] = [(r["id"], None) for r in alert_rows(engine)]
        assert deliver_alerts(engine, port) == ["sent", "sent"]
        assert len(hook.posts) == 3
