"""The web page in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium; never a browser a pip package downloads),
against real ``cronchain serve`` processes on PostgreSQL: the jobs page lists the jobs
with their next ticks, a job's page shows a skipped slot with its reason, a visitor
without credentials gets no controls, and a signed-in operator pauses a job with the
form and then sees it paused, as ``cronchain jobs`` does; runs of real workers read
with their times, charts and pages of their own; the list's filters live in the URL,
and the pages update themselves.

``CRONCHAIN_SCREENSHOTS=DIR`` saves the pages there: the site's screenshots
(``docs/screenshots``) are taken so, never by hand.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster
from tests.support.services import free_port, unavailable
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CREDENTIALS = "admin:s3cret"
JOBS = """project: web
jobs:
  - name: nightly
    schedule: "30 2 * * *"
    timezone: Europe/Paris
    noop: {}
  - name: ping
    schedule: every 1s
    noop: {}
"""


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium from Debian's packages; missing, a skip (a failure in CI)."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        unavailable("chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    options.add_argument("--lang=en-US")  # the viewer's zone is written in its words
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def serve(cluster: Cluster, name: str, *credentials: str) -> str:
    """``cronchain serve`` on a free port (with ``--basic-auth`` if given); its URL once
    it answers."""
    port = free_port()
    cluster.start(
        name,
        sys.executable,
        "-m",
        "cronchain.scheduler.cli",
        "serve",
        "--port",
        str(port),
        *credentials,
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(f"{base}/healthz"), 30, f"cronchain serve ({name})")
    return base


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # 503: it answers, unhealthy (no workers here)
    except OSError:
        return False


def sign_in(driver: Any, credentials: str | None) -> None:
    """Send basic auth with every request this browser makes (as a browser does once
    its user typed them into the prompt), or stop sending it."""
    driver.execute_cdp_cmd("Network.enable", {})
    headers = {}
    if credentials is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})


def running(cluster: Cluster, jobs: str) -> str:
    """``jobs`` applied to a cluster whose control and work workers are up, and a
    read-only ``cronchain serve`` on it: its URL."""
    cluster.cronchain("db", "upgrade")
    (cluster.folder / "jobs.yaml").write_text(jobs)
    cluster.start_worker()
    cluster.start_work_worker()
    cluster.wait_ready("worker")
    cluster.wait_ready("work")
    cluster.cronchain("apply", "jobs.yaml")
    return serve(cluster, "serve-readonly")


def screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("CRONCHAIN_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def test_operator_pauses_a_job_in_the_browser(cluster: Cluster, browser: Any):
    from selenium.webdriver.common.by import By

    cluster.cronchain("db", "upgrade")
    (cluster.folder / "jobs.yaml").write_text(JOBS)
    cluster.cronchain("apply", "jobs.yaml")
    # Slots skipped with a reason: paused over a few of ping's 1 s slots, resumed
    # without catch-up, the slots it missed are recorded SKIPPED ("paused").
    cluster.cronchain("pause", "web/ping")
    time.sleep(2.5)
    cluster.cronchain("resume", "web/ping")

    base = serve(cluster, "serve", "--basic-auth", CREDENTIALS)
    readonly = serve(cluster, "serve-readonly")

    # A visitor without credentials: the protected page asks for them; the read-only
    # one shows the job without a single control.
    sign_in(browser, None)
    browser.get(f"{base}/jobs/web/ping")
    assert "web/ping" not in browser.page_source  # 401: Chromium asks, shows nothing
    assert browser.find_elements(By.CSS_SELECTOR, "form") == []
    browser.get(f"{readonly}/jobs/web/ping")
    assert "read-only" in browser.find_element(By.TAG_NAME, "header").text
    assert browser.find_elements(By.CSS_SELECTOR, "form[method=post]") == []

    # The operator: the jobs, with their next ticks in their zones.
    sign_in(browser, CREDENTIALS)
    browser.get(f"{base}/")
    rows = {
        r.find_element(By.TAG_NAME, "a").text: r
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.job")
    }
    assert set(rows) == {"web/nightly", "web/ping"}
    nightly_tick = rows["web/nightly"].find_element(By.CSS_SELECTOR, "td.tick time").text
    assert nightly_tick.endswith(("02:30:00 CET", "02:30:00 CEST")), nightly_tick
    screenshot(browser, "jobs.png")

    # A job's page: the skipped slots with their reason.
    rows["web/ping"].find_element(By.TAG_NAME, "a").click()
    wait_until(lambda: browser.current_url.endswith("/jobs/web/ping"), 10, "the job page")
    skipped = browser.find_elements(By.CSS_SELECTOR, "section.timeline tr.s-row-SKIPPED")
    assert skipped and "paused: missed while the job was paused" in skipped[-1].text
    screenshot(browser, "job.png")

    # Pause it with the form, which asks first; the page then says so, and so does the CLI.
    browser.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys("from the browser")
    browser.find_element(By.CSS_SELECTOR, "button[value=pause]").click()
    asked = browser.switch_to.alert
    assert asked.text == "Pause web/ping? No slot fires until it is resumed."
    asked.dismiss()  # not yet: nothing happens, even a while later
    time.sleep(1)
    assert "done=" not in browser.current_url
    assert not any(j["paused"] for j in json.loads(cluster.cronchain("jobs", "--json")))
    browser.find_element(By.CSS_SELECTOR, "button[value=pause]").click()
    browser.switch_to.alert.accept()
    wait_until(lambda: "done=paused" in browser.current_url, 10, "the pause")
    assert browser.find_element(By.CSS_SELECTOR, "h1 .state").text == "SUSPENDED"
    assert "Paused: from the browser" in browser.find_element(By.CSS_SELECTOR, ".paused").text
    assert browser.find_elements(By.CSS_SELECTOR, "button[value=resume]")
    jobs = json.loads(cluster.cronchain("jobs", "--json"))
    ping = next(j for j in jobs if j["id"] == "web/ping")
    assert ping["paused"] and ping["state"] == "SUSPENDED"
    assert ping["pause_reason"] == "from the browser"

    # A paused job refuses a trigger: the refusal is the site's own page, in a sentence.
    browser.find_element(By.CSS_SELECTOR, "button[value=trigger]").click()
    asked = browser.switch_to.alert  # the confirmation comes before the trigger
    assert asked.text == "Run web/ping now, once, beside its schedule?"
    asked.accept()
    wait_until(lambda: browser.current_url.endswith("/trigger"), 10, "the refusal")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Refused"
    said = browser.find_element(By.CSS_SELECTOR, "p.sentence").text
    assert said == (
        "web/ping was not triggered: cannot trigger a job that is SUSPENDED."
        " It is paused: resume it first."
    )
    browser.find_element(By.LINK_TEXT, "Back to the job").click()
    wait_until(lambda: browser.current_url.endswith("/jobs/web/ping"), 10, "the way back")


RUNS = """project: web
jobs:
  - name: ping
    schedule: every 2s
    noop: {sleep: 0.3}
"""


def test_a_jobs_runs_read_as_a_person_reads_them(cluster: Cluster, browser: Any):
    """Runs done by real workers: the history says when each started and what it took
    (exact on hover, in the job's zone and the viewer's), the charts draw a bar per run,
    and a run's page names the worker of its attempt."""
    from selenium.webdriver.common.by import By

    base = running(cluster, RUNS)
    sign_in(browser, None)
    # The viewer's zone, which only the browser knows: each exact time says it there too.
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "America/Sao_Paulo"})

    def finished() -> list[Any]:
        browser.get(f"{base}/jobs/web/ping")
        return [
            row
            for row in browser.find_elements(By.CSS_SELECTOR, "section.history tbody tr")
            if "SUCCEEDED" in row.text
        ]

    wait_until(lambda: len(finished()) >= 3, 60, "three runs of web/ping")
    row = finished()[0]
    took = row.find_element(By.CSS_SELECTOR, "td.took").text
    figure, unit = took.split()
    assert float(figure) * {"ms": 0.001, "s": 1}[unit] >= 0.3, took  # it slept 0.3 s
    started = row.find_element(By.CSS_SELECTOR, "td.started time")
    assert re.fullmatch(r"just now|\d+ (s|min) ago", started.text), started.text
    title = started.get_attribute("title")
    assert re.search(r"UTC \(\S+Z\)\nin your zone \(America/Sao_Paulo\): .*GMT-3$", title), title
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.chart-took rect")
    assert len(bars) >= 3 and all(bar.size["height"] > 0 for bar in bars)
    assert browser.find_element(By.CSS_SELECTOR, "svg.chart-took").size["width"] > 300
    assert "median" in browser.find_element(By.CSS_SELECTOR, "figure.chart figcaption").text
    history = browser.find_element(By.CSS_SELECTOR, "section.history")
    browser.execute_script("arguments[0].scrollIntoView()", history)
    screenshot(browser, "job-runs.png")

    run = row.find_element(By.CSS_SELECTOR, "td a").text
    row.find_element(By.CSS_SELECTOR, "td a").click()
    wait_until(lambda: browser.current_url.endswith(f"/runs/{run}"), 10, "the run's page")
    [attempt] = browser.find_elements(By.CSS_SELECTOR, "section.attempts tbody tr")
    cells = [cell.text for cell in attempt.find_elements(By.TAG_NAME, "td")]
    assert cells[0] == "1" and cells[1].startswith("work@"), cells
    assert cells[4] == took and "SUCCEEDED" in cells[5]
    assert "ran" in browser.find_element(By.CSS_SELECTOR, "section.explain").text
    screenshot(browser, "run.png")


DASHBOARD = """project: web
jobs:
  - name: ping
    schedule: every 2s
    noop: {}
  - name: broken
    schedule: every 2s
    noop: {fail: true}
  - name: on-demand
    schedule: triggered
    noop: {}
"""


def test_the_list_filters_in_the_url_and_pages_update_without_a_reload(
    cluster: Cluster, browser: Any
):
    """The filter form narrows the rows and says so in the URL; a run triggered from the
    command line appears in the job's open page without a reload (the page's script
    fetches its live parts again)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    base = running(cluster, DASHBOARD)
    sign_in(browser, None)

    def shown() -> list[str]:
        """The listed jobs, read in one step: the live refresh may swap the rows between
        two reads of elements."""
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('tr.job a'), a => a.textContent)"
        )

    browser.get(f"{base}/")
    # web/broken's first failure comes into the open list by itself.
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "td .o-failed"), 30, "a failure")
    assert shown() == ["web/broken", "web/on-demand", "web/ping"]
    Select(browser.find_element(By.NAME, "outcome")).select_by_visible_text("failed")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait_until(lambda: "outcome=failed" in browser.current_url, 10, "the filtered list")
    assert shown() == ["web/broken"]
    counted = browser.execute_script("return document.querySelector('p.count').textContent")
    assert "jobs 1–1 of 1" in counted
    browser.get(browser.current_url.replace("outcome=failed", "outcome=never"))
    assert shown() == ["web/on-demand"]  # the URL alone makes the view

    browser.get(f"{base}/jobs/web/on-demand")
    assert "no runs yet" in browser.find_element(By.ID, "history").text
    browser.execute_script("window.notReloaded = true")
    cluster.cronchain("trigger", "web/on-demand")
    wait_until(
        lambda: "SUCCEEDED" in browser.find_element(By.ID, "history").text, 30, "the live run"
    )
    assert browser.execute_script("return window.notReloaded === true")

    # The next minutes: web/ping and web/broken fire in the same even seconds, a herd
    # of two at a threshold of two, with the advice to spread them.
    browser.find_element(By.LINK_TEXT, "forecast").click()
    wait_until(lambda: browser.current_url.endswith("/forecast"), 10, "the forecast")
    window = browser.find_element(By.NAME, "window")
    window.clear()
    window.send_keys("5m")
    threshold = browser.find_element(By.NAME, "threshold")
    threshold.clear()
    threshold.send_keys("2")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait_until(lambda: "threshold=2" in browser.current_url, 10, "the forecast at 2")
    [herd] = browser.find_elements(By.CSS_SELECTOR, "tr.herd")  # one, again and again
    assert re.search(r"and 1[34]\d more, every 2s", herd.text), herd.text  # over 5 minutes
    assert "web 2" in herd.text and "offsets from 0 to 1 s" in herd.text
    assert browser.find_element(By.CSS_SELECTOR, "svg.heat").size["width"] > 300
    screenshot(browser, "forecast.png")

    # By keyboard alone: tab to the search, type, Enter.
    browser.get(f"{base}/")
    for _ in range(30):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.switch_to.active_element.get_attribute("name") == "q":
            break
    browser.switch_to.active_element.send_keys("broken", Keys.ENTER)
    wait_until(lambda: "q=broken" in browser.current_url, 10, "the search by keyboard")
    assert shown() == ["web/broken"]

    # A phone's width and a dark screen: nothing scrolls sideways, every page is dark.
    browser.get(f"{base}/")
    dark = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", dark)
    screenshot(browser, "jobs-dark.png")
    phone = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", phone)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    browser.get(f"{base}/")
    assert browser.execute_script("return window.innerWidth") == 390
    screenshot(browser, "jobs-phone.png")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", dark)
    for path, name in (("/", "jobs"), ("/jobs/web/ping", "job"), ("/forecast", "forecast")):
        browser.get(base + path)
        wide, seen = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide <= seen, (path, wide, seen)
        background = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor"
        )
        assert background == "rgb(18, 20, 23)", (path, background)
        screenshot(browser, f"{name}-phone-dark.png")
