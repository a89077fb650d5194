"""The dashboard in headless Chromium (Debian's chromium + chromium-driver, via WebDriver).

No browser is downloaded: the tests use /usr/bin/chromium and
/usr/bin/chromedriver (tests/dashboard/ci-install.sh installs them). Without
them the tests skip locally and FAIL under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.dashboard import Dashboard
from agentcoordd.model.identity import Identity
from agentcoordd.store.cache import CachingStore
from agentcoordd.store.local import LocalStore
from dashstate import REPO, generate

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parents[2] / "docs"
WAIT = 20.0


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests must run in CI: {reason} (bash tests/dashboard/ci-install.sh)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        _unavailable("Debian chromium / chromium-driver are not installed")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed")
    profile = tempfile.mkdtemp(prefix="agentcoord-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Served:
    def __init__(self, root: Path, board: Dashboard, ctx: Ctx, portal: Any) -> None:
        self.root, self.board, self.ctx, self.portal = root, board, ctx, portal

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.board.port}/"


@pytest.fixture
def served(tmp_path: Path, clock) -> Iterator[Served]:  # noqa: ANN001
    """A real dashboard server in a background event loop (the browser test is sync)."""
    root = tmp_path / "state"
    root.mkdir()
    store = CachingStore(LocalStore(root))
    board = Dashboard(lambda: store, clock, Identity(machine_id="ws-1"), refresh_seconds=2)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(board.serve)
        try:
            yield Served(root, board, Ctx(store, clock, Identity(machine_id="ws-1")), portal)
        finally:
            future.cancel()


def wait_for(driver: Any, script: str, *args: Any, timeout: float = WAIT) -> Any:
    """Poll a JS expression (`return …`) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script, *args)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {script}")
        time.sleep(0.05)


def _rows(driver: Any) -> int:
    return driver.execute_script("return document.querySelectorAll('#overview tr.lane').length")


def test_overview_renders_a_generated_batch_of_50_lanes(driver: Any, served: Served, clock,  # noqa: ANN001
                                                        tmp_path: Path) -> None:
    generate(served.root, "batch-demo-50", 50, clock.now())

    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '50'")

    assert _rows(driver) == 50
    text = driver.find_element("id", "overview").text
    assert "batch-demo-50" in text and "#1000" in text and "box-1" in text
    liveness = driver.execute_script(
        "return [...document.querySelectorAll('#overview tr.lane td:nth-child(7) .badge')].slice(0, 4).map(b => b.textContent)")
    assert liveness == ["live", "stale", "dead", "no-heartbeat"]
    # The README's screenshot is refreshed on request only: tests never write the checkout.
    shot = DOCS / "dashboard.png" if os.environ.get("AGENT_COORD_UPDATE_SCREENSHOT") else tmp_path / "dashboard.png"
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_search_finds_a_lane_by_pr_number(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    generate(served.root, "batch-demo-50", 50, clock.now())
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '50'")

    driver.find_element("id", "search").send_keys("#1023")
    wait_for(driver, "return document.body.dataset.renderedLanes === '1'")

    row = driver.find_element("css selector", "#overview tr.lane")
    assert row.get_attribute("data-lane") == "batch-demo-50:l23"
    assert row.get_attribute("data-pr") == "1023"
    assert "1 lane(s) match" in driver.find_element("id", "search-results").text


def test_health_tab_lists_a_planted_problem(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    generate(served.root, "batch-demo-5", 5, clock.now())
    LocalStore(served.root).write_sync(f"claims/{REPO}/777.json", {
        "schema_version": 1, "repo": REPO, "target": "777", "agent_id": "w-ghost", "status": "active",
        "batch_id": "batch-that-was-never-registered", "machine_id": "box-9",
        "claimed_at": "2026-06-13T00:00:00Z", "updated_at": "2026-06-13T00:00:00Z",
        "expires_at": "2026-06-13T04:00:00Z"}, None)
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '5'")

    driver.find_element("css selector", "#tabs button[data-tab=health]").click()
    wait_for(driver, "return document.querySelector('#health-warnings tr.warning[data-signal=missing_batch_manifest]')")

    warnings = driver.find_element("id", "health-warnings").text
    assert "batch-that-was-never-registered" in warnings
    assert driver.find_element("id", "health-verdict-text").text == "warnings"


def test_importing_a_pasted_launch_prompt_creates_the_manifest(driver: Any, served: Served) -> None:
    prompt = (f"Use $pr-batch to complete this batch with subagents.\n\nRepository: {REPO}\n"
              "Batch id: batch-from-browser\nBatch objective: Imported in the browser.\n\n"
              "Lane ui: owner worker-ui, PR #501\nLane api: owner worker-api, PR #502, depends on ui\n")
    driver.get(served.url)
    wait_for(driver, "return window.agentcoord && window.agentcoord.loads > 0")

    driver.find_element("css selector", "#tabs button[data-tab=import]").click()
    driver.find_element("id", "import-prompt").send_keys(prompt)
    driver.find_element("id", "import-button").click()
    wait_for(driver, "return document.getElementById('import-result').dataset.status")

    assert driver.find_element("id", "import-result").get_attribute("data-status") == "written"
    manifest = json.loads((served.root / "batches" / "batch-from-browser.json").read_text())
    assert manifest["launch_prompt"].strip() == prompt.strip()
    assert [lane["name"] for lane in manifest["lanes"]] == ["ui", "api"]
    assert manifest["lanes"][1]["depends_on"] == ["batch-from-browser:ui"]


def test_a_stop_request_appears_as_an_event_and_reaches_the_lane(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    generate(served.root, "batch-demo-5", 5, clock.now())
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '5'")

    driver.find_element("css selector", "[data-open-batch='batch-demo-5']").click()
    wait_for(driver, "return document.getElementById('batch-detail').dataset.batch === 'batch-demo-5'")
    driver.find_element("id", "stop-message").send_keys("Restart with smaller lanes.")
    driver.find_element("id", "stop-button").click()
    wait_for(driver, "return document.querySelector('#batch-events tr.event[data-type=\"batch.stop_requested\"]')")

    assert "Restart with smaller lanes." in driver.find_element("id", "batch-events").text
    # What the daemon checks on a lane's next ctl call for this batch:
    state = served.portal.call(telemetry.stop_state, served.ctx, "batch-demo-5")
    assert state["stop_requested"] is True
    assert "Restart with smaller lanes." in (telemetry.stop_notice(state) or "")


def test_the_batch_view_lists_an_open_request_until_it_is_answered(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    from agentcoordd.coord import answers, events

    generate(served.root, "batch-demo-5", 5, clock.now())
    asked = served.portal.call(lambda: events.record_event(
        served.ctx, batch_id="batch-demo-5", type="help_requested", lane="l1", agent_id="w-1",
        message="which database?", typed={"reason": "question"}))["event"]["event_id"]
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '5'")
    driver.find_element("css selector", "[data-open-batch='batch-demo-5']").click()
    row = wait_for(driver, "return document.querySelector(`#batch-requests tr.request[data-event='${arguments[0]}']`)", asked)
    assert "help_requested" in row.text and "which database?" in row.text

    served.portal.call(lambda: answers.answer(served.ctx, batch_id="batch-demo-5", to_event=asked,
                                              message="staging"))
    wait_for(driver, "return !document.querySelector('#batch-requests tr.request')")
    assert "No open requests." in driver.find_element("id", "batch-requests").text


def test_overview_render_time_over_1000_lanes(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    generate(served.root, "batch-demo-1000", 1000, clock.now())

    started = time.perf_counter()
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '1000'", timeout=60)
    loaded = time.perf_counter() - started

    render_ms = driver.execute_script("return window.agentcoord.renders[0].ms")
    to_render_ms = driver.execute_script("return performance.now()")
    print(f"\noverview over 1000 lanes: render {render_ms:.1f} ms in the browser; "
          f"page start to rendered {to_render_ms:.0f} ms (API + render); "
          f"driver.get to rendered {loaded * 1000:.0f} ms")
    assert _rows(driver) == 1000


def test_the_batch_view_updates_live_from_the_daemons_event_feed(driver: Any) -> None:
    """Through a real agentcoordd: its dashboard streams the batch's feed (server-sent
    events); with auto-refresh off, a new event still shows without a page load."""
    import datetime as dt

    from integration.helpers import make_daemon

    base = Path(tempfile.mkdtemp(prefix="acdf.", dir="/tmp"))
    d = make_daemon(base)
    d.start()
    try:
        generate(d.root, "batch-live", 3, dt.datetime.now(dt.timezone.utc))
        shown = d.ctl("dashboard", "--json")
        assert shown.returncode == 0, shown.stderr
        driver.get(json.loads(shown.stdout)["url"])
        wait_for(driver, "return document.body.dataset.renderedLanes === '3'")
        driver.find_element("id", "auto-refresh").click()  # off: only the feed can update the page
        driver.execute_script("window.__samePage = true")
        driver.find_element("css selector", "[data-open-batch='batch-live']").click()
        wait_for(driver, "return document.getElementById('live').dataset.state === 'live'")

        written = d.ctl("record-event", "--batch-id", "batch-live", "--type", "blocked",
                        "--message", "needs a human review")
        assert written.returncode == 0, written.stderr
        wait_for(driver, "return document.querySelector('#batch-events tr.event[data-type=\"blocked\"]')",
                 timeout=10)

        assert "needs a human review" in driver.find_element("id", "batch-events").text
        assert driver.execute_script("return window.__samePage === true && window.agentcoord.feedEvents") >= 1
        assert not driver.find_element("id", "auto-refresh").is_selected()
        status = json.loads(d.ctl("daemon", "status", "--json").stdout)
        assert [(s["batch_id"], s["followers"]) for s in status["feed"]["sources"]] == [("batch-live", 1)]
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)
