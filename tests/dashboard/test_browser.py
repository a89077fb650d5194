"""The dashboard in headless Chromium (Debian's chromium + chromium-driver, via WebDriver).

No browser is downloaded: the tests use /usr/bin/chromium and
/usr/bin/chromedriver (tests/dashboard/ci-install.sh installs them). Without
them the tests skip locally and FAIL under CI=true.

The views an operator decides from are also saved as screenshots in the run's
artifacts ($AGENT_COORD_ARTIFACTS, else the test's tmp_path; the paths are listed
in the run's summary): the overview during a run, the batch view answering a
request, the claims tab, and the page before its first fetch.
"""

from __future__ import annotations

import contextlib
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
from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.claims import claim, release
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.heartbeats import heartbeat
from agentcoordd.daemon.dashboard import Dashboard
from agentcoordd.model.identity import Identity
from agentcoordd.model.records import Metadata
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
    def __init__(self, root: Path, board: Dashboard, ctx: Ctx, portal: Any, held: Any = None) -> None:  # noqa: ANN401
        self.root, self.board, self.ctx, self.portal, self.held = root, board, ctx, portal, held

    def open_store(self) -> None:
        """Let the requests a held store keeps waiting go on."""
        self.portal.call(self.held.set)

    def as_machine(self, machine: str) -> Ctx:
        """A context writing this server's store from another machine."""
        return Ctx(self.ctx.store, self.ctx.clock, Identity(machine_id=machine))

    @property
    def url(self) -> str:
        """The login URL: the browser keeps the token as a cookie, then shows the page."""
        return self.board.login_url


@contextlib.contextmanager
def serving(root: Path, clock: Any, *, held: bool = False) -> Iterator[Served]:  # noqa: ANN401
    """A real dashboard server over a real store in `root`, in a background event loop
    (the browser test is sync). `held`: every request waits for the store until
    `Served.open_store()` (a backend that answers slowly)."""
    store = CachingStore(LocalStore(root))
    with anyio.from_thread.start_blocking_portal() as portal:
        gate = portal.call(anyio.Event) if held else None

        async def chosen_store() -> Any:  # noqa: ANN401
            if gate is not None:
                await gate.wait()
            return store

        board = Dashboard(chosen_store, clock, Identity(machine_id="ws-1"), refresh_seconds=2)
        future, _ = portal.start_task(board.serve)
        try:
            yield Served(root, board, Ctx(store, clock, Identity(machine_id="ws-1")), portal, gate)
        finally:
            future.cancel()


@pytest.fixture
def served(tmp_path: Path, clock) -> Iterator[Served]:  # noqa: ANN001
    root = tmp_path / "state"
    root.mkdir()
    with serving(root, clock) as server:
        yield server


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


def _column(driver: Any, cell: str, count: int) -> list[str]:
    """The text of one cell class (state, holder, liveness, …) of the first `count` lanes."""
    return driver.execute_script(
        "return [...document.querySelectorAll(`#overview tr.lane td.${arguments[0]}`)]"
        ".slice(0, arguments[1]).map(td => td.textContent.trim())", cell, count)


def _cells(driver: Any, lane: str) -> dict[str, str]:
    """One lane's row of the overview: {column header: cell text}."""
    return driver.execute_script(
        "const row = document.querySelector(`#overview tr.lane[data-lane='${arguments[0]}']`);"
        "const heads = [...row.closest('table').querySelectorAll('th')].map(th => th.textContent);"
        "return Object.fromEntries([...row.children].map((td, i) => [heads[i], td.textContent.trim()]))", lane)


def test_overview_renders_a_generated_batch_of_50_lanes(driver: Any, served: Served, clock,  # noqa: ANN001
                                                        tmp_path: Path) -> None:
    generate(served.root, "batch-demo-50", 50, clock.now())

    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '50'")

    assert _rows(driver) == 50
    text = driver.find_element("id", "overview").text
    assert "batch-demo-50" in text and "#1000" in text and "box-1" in text
    # each lane from its own claim: the holder's liveness, none without a holder
    assert _column(driver, "state", 4) == ["held", "stale holder", "dead holder", "not started"]
    assert _column(driver, "liveness", 4) == ["live", "stale", "dead", ""]
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


@contextlib.contextmanager
def running_daemon(*args: str) -> Iterator[Any]:
    """A real agentcoordd (tests/integration/helpers.py) on a local root in a short temp dir."""
    from integration.helpers import make_daemon

    base = Path(tempfile.mkdtemp(prefix="acdf.", dir="/tmp"))
    d = make_daemon(base)
    d.start(*args)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def ok(result: Any) -> Any:  # noqa: ANN401
    assert result.returncode == 0, result.stderr.decode()
    return result


def sign_in(driver: Any, d: Any, lanes: int, **env: str) -> None:  # noqa: ANN401
    """`agentcoordctl dashboard` (from a caller with `env`), then its login URL in the browser."""
    shown = json.loads(ok(d.ctl("dashboard", "--json", env=env)).stdout)
    driver.get(shown["login_url"])
    wait_for(driver, f"return document.body.dataset.renderedLanes === '{lanes}'")


def test_the_batch_view_updates_live_from_the_daemons_event_feed(driver: Any) -> None:
    """Through a real agentcoordd: its dashboard streams the batch's feed (server-sent
    events); with auto-refresh off, a new event still shows without a page load."""
    import datetime as dt

    with running_daemon() as d:
        generate(d.root, "batch-live", 3, dt.datetime.now(dt.timezone.utc))
        sign_in(driver, d, 3)
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


# ---- the operator's views during a run (issue 44) ------------------------------------

FLEET, FLEET_REPO = "fleet-day", "acme/widgets"


def _pool_lane(name: str, target: str, **extra: Any) -> dict[str, Any]:  # noqa: ANN401
    return {"name": name, "owner": "pool", "pool": True, "targets": [target], **extra}


FLEET_MANIFEST = {"batch_id": FLEET, "repo": FLEET_REPO, "objective": "Rewrite the parser", "lanes": [
    _pool_lane("parser", "101", pr_url=f"https://github.com/{FLEET_REPO}/pull/201"),
    _pool_lane("lexer", "102"), _pool_lane("fmt", "103"), _pool_lane("cli", "104"),
    {"name": "docs", "owner": "w-docs", "targets": ["105"], "depends_on": [f"{FLEET}:parser"]},
    _pool_lane("release", "106"),
]}


async def _fleet_mid_run(served: Served) -> None:
    """Pool lanes mid-run, written by the use cases agents call (fake clock): `parser`
    held by a live agent (a PR, a branch), `lexer` by one gone quiet (stale), `fmt` by
    one SIGKILLed long ago (dead), `cli` closed done; `docs` waits on parser; `release`
    not started."""
    clock = served.ctx.clock
    await register_batch(served.ctx, manifest=json.dumps(FLEET_MANIFEST).encode())
    machines = {"a-live": "box-a", "a-stale": "box-b", "a-dead": "box-c", "a-done": "box-a"}
    ctx = {agent: served.as_machine(machine) for agent, machine in machines.items()}
    await claim(ctx["a-live"], agent_id="a-live", repo=FLEET_REPO, target="101", batch_id=FLEET,
                branch="feat/parser", ttl=3600)
    for agent, target in (("a-stale", "102"), ("a-dead", "103")):  # no branch: absent in Claims
        await claim(ctx[agent], agent_id=agent, repo=FLEET_REPO, target=target, batch_id=FLEET, ttl=3600)
    await heartbeat(ctx["a-dead"], agent_id="a-dead", repo=FLEET_REPO, target="103", ttl=10)
    await heartbeat(ctx["a-stale"], agent_id="a-stale", repo=FLEET_REPO, target="102", ttl=60)
    await claim(ctx["a-done"], agent_id="a-done", repo=FLEET_REPO, target="104", batch_id=FLEET)
    await release(ctx["a-done"], agent_id="a-done", repo=FLEET_REPO, target="104", terminal="done")
    clock.advance(seconds=100)  # a-stale's heartbeat (TTL 60) is stale now, a-dead's (TTL 10) dead
    await heartbeat(ctx["a-live"], agent_id="a-live", repo=FLEET_REPO, target="101", ttl=60,
                    meta=Metadata(phase="implement"))


def _open_fleet(driver: Any, served: Served) -> None:
    served.portal.call(_fleet_mid_run, served)
    driver.get(served.url)
    wait_for(driver, f"return document.body.dataset.renderedLanes === '{len(FLEET_MANIFEST['lanes'])}'")


def test_the_overview_during_a_run_says_who_holds_each_lane(driver: Any, served: Served,
                                                            screenshots: Any) -> None:  # noqa: ANN401
    _open_fleet(driver, served)

    rows = {lane["name"]: _cells(driver, f"{FLEET}:{lane['name']}") for lane in FLEET_MANIFEST["lanes"]}
    shown = {name: (r["State"], r["Holder"], r["Liveness"]) for name, r in rows.items()}
    assert shown == {
        "parser": ("held", "a-live for 1 min", "live"),
        "lexer": ("stale holder", "a-stale for 1 min", "stale"),
        "fmt": ("dead holder", "a-dead for 1 min", "dead"),
        "cli": ("closed: done", "", ""),  # closed: its terminal, no liveness alarm
        "docs": ("blocked on parser", "", ""),
        "release": ("not started", "", ""),
    }
    parser = rows["parser"]
    assert (parser["Owner"], parser["Status"], parser["Phase"], parser["Machine"]) == (
        "pool", "in_progress", "implement", "box-a")
    # a PR only where there is one; the issue number is the lane's target, never a PR
    assert {name: (r["Target"], r["PR"]) for name, r in rows.items()} == {
        "parser": ("101", "#201"), "lexer": ("102", ""), "fmt": ("103", ""), "cli": ("104", ""),
        "docs": ("105", ""), "release": ("106", "")}
    assert driver.find_element("css selector", f"tr[data-lane='{FLEET}:parser'] td.pr a").get_attribute(
        "href") == f"https://github.com/{FLEET_REPO}/pull/201"
    badge = driver.find_element("css selector", f"tr[data-lane='{FLEET}:fmt'] td.state .badge")
    assert badge.value_of_css_property("background-color") == "rgba(197, 48, 48, 1)"  # red
    screenshots.save(driver, "dashboard-overview.png")


def test_the_claims_tab_shows_a_claim_without_a_branch_as_absent(driver: Any, served: Served,
                                                                 screenshots: Any) -> None:  # noqa: ANN401
    _open_fleet(driver, served)

    driver.find_element("css selector", "#tabs button[data-tab=records]").click()
    wait_for(driver, "return document.querySelector('#claims tr.claim')")

    branches = driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#claims tr.claim')]"
        ".map(tr => [tr.dataset.target, tr.querySelector('td.branch').textContent]))")
    assert branches == {f"{FLEET_REPO}#101": "feat/parser", f"{FLEET_REPO}#102": "—",
                        f"{FLEET_REPO}#103": "—", f"{FLEET_REPO}#104": "—"}
    assert "UNKNOWN" not in driver.find_element("id", "tab-records").text
    screenshots.save(driver, "dashboard-claims.png")


def test_the_batch_header_names_no_machine_the_manifest_does_not_have(driver: Any, served: Served) -> None:
    _open_fleet(driver, served)

    driver.find_element("css selector", f"[data-open-batch='{FLEET}']").click()
    wait_for(driver, f"return document.getElementById('batch-detail').dataset.batch === '{FLEET}'")

    assert driver.find_element("id", "batch-origin").text == (
        f"{FLEET_REPO} · Rewrite the parser · registered 2026-06-13T00:30:00Z")


def test_the_page_says_loading_until_its_first_fetch_completes(driver: Any, tmp_path: Path, clock,  # noqa: ANN001
                                                               screenshots: Any) -> None:  # noqa: ANN401
    root = tmp_path / "state"
    root.mkdir()
    generate(root, "batch-demo-5", 5, clock.now())
    with serving(root, clock, held=True) as slow:
        driver.get(slow.url)  # the page and its script load; the overview's fetch waits

        assert driver.execute_script("return document.body.dataset.load") == "loading"
        assert driver.find_element("id", "load-state").text == "Loading…"
        screenshots.save(driver, "dashboard-loading.png")
        slow.open_store()
        wait_for(driver, "return document.body.dataset.renderedLanes === '5'")
        assert not driver.find_element("id", "load-state").is_displayed()


def test_the_page_says_why_it_cannot_load_and_recovers(driver: Any, screenshots: Any) -> None:  # noqa: ANN401
    """A daemon started with --metrics-port serves the page before any `dashboard` call
    chose its backend: the API answers 503, and the page says so instead of staying blank."""
    import datetime as dt
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with running_daemon("--metrics-port", str(port)) as d:
        generate(d.root, "batch-demo-2", 2, dt.datetime.now(dt.timezone.utc))
        deadline = time.monotonic() + 30  # the port's server writes its token once it listens
        while not d.dashboard_token() and time.monotonic() < deadline:
            time.sleep(0.05)
        driver.get(f"http://127.0.0.1:{port}/login?token={d.dashboard_token()}")
        wait_for(driver, "return document.body.dataset.load === 'error'")

        text = driver.find_element("id", "load-state").text
        assert text.startswith("Could not load the dashboard: the dashboard shows no backend yet")
        assert "Retrying every 5 s." in text
        screenshots.save(driver, "dashboard-error.png")
        ok(d.ctl("dashboard"))  # chooses the backend: the next refresh shows it
        wait_for(driver, "return document.body.dataset.renderedLanes === '2'")
        assert driver.execute_script("return document.body.dataset.load") == "ready"


WAVE = {"batch_id": "wave-9", "repo": FLEET_REPO, "objective": "Parser rewrite",
        "created_by_machine": "ws-coord", "lanes": [_pool_lane("parser", "7")]}


def _wave(d: Any) -> str:  # noqa: ANN401
    """Batch wave-9 registered, worker-parser holding its lane and asking for help; the request's id."""
    manifest = d.base / "wave.json"
    manifest.write_text(json.dumps(WAVE))
    ok(d.ctl("register-batch", "--file", str(manifest)))
    ok(d.ctl("claim", "--agent-id", "worker-parser", "--repo", FLEET_REPO, "--target", "7",
             "--batch-id", "wave-9"))
    asked = ok(d.ctl("record-event", "--batch-id", "wave-9", "--type", "help_requested", "--reason",
                     "question", "--lane", "parser", "--agent-id", "worker-parser",
                     "--message", "staging or prod database?", "--json"))
    return json.loads(asked.stdout)["event"]["event_id"]


def _open_wave(driver: Any, d: Any) -> None:  # noqa: ANN401
    sign_in(driver, d, 1, AGENT_COORD_MACHINE_ID="ws-ops")
    driver.find_element("css selector", "[data-open-batch='wave-9']").click()
    wait_for(driver, "return document.getElementById('batch-detail').dataset.batch === 'wave-9'")


def test_an_open_request_is_answered_from_the_batch_view(driver: Any, screenshots: Any) -> None:  # noqa: ANN401
    """Through a real agentcoordd: click Answer, type, send; the answer is the one
    `agentcoordctl answer` would write (waiters take it) and the request leaves the list."""
    with running_daemon() as d:
        asked = _wave(d)
        _open_wave(driver, d)
        assert driver.find_element("id", "batch-origin").text.endswith("by ws-coord")
        wait_for(driver, "return document.querySelector(`#batch-requests tr.request[data-event='${arguments[0]}']`)", asked)

        driver.find_element("css selector", f"button[data-answer='{asked}']").click()
        driver.find_element("id", "answer-message").send_keys("use staging")
        driver.find_element("id", "answer-decision").send_keys("proceed")
        driver.find_element("id", "answer-agent").send_keys("lead")
        screenshots.save(driver, "dashboard-batch-answering.png")
        driver.find_element("id", "answer-send").click()
        wait_for(driver, "return document.getElementById('answer-result').dataset.status")

        assert driver.find_element("id", "answer-result").get_attribute("data-status") == "answered", \
            driver.find_element("id", "answer-result").text
        wait_for(driver, "return !document.querySelector('#batch-requests tr.request')")
        assert driver.find_element("id", "batch-requests").text == "No open requests."
        recorded = [json.loads(p.read_text()) for p in (d.root / "events" / "wave-9").glob("*.json")]
        [answer] = [e for e in recorded if e["type"] == "help_answered"]
        assert (answer["reply_to"], answer["message"], answer["decision"]) == (asked, "use staging", "proceed")
        assert answer["written_by"] == {"daemon": "agentcoordd", "machine_id": "ws-ops", "agent_id": "lead"}
        waited = ok(d.ctl("wait", "--until-answered", "--batch-id", "wave-9", "--event-id", asked,
                          "--timeout", "10"))
        assert b"use staging" in waited.stdout
        wait_for(driver, "return document.querySelector('#batch-events tr.event[data-type=\"help_answered\"]')")
        screenshots.save(driver, "dashboard-batch.png")


def test_a_stop_requested_from_the_batch_view_reaches_the_lanes_next_call(driver: Any) -> None:
    """Through a real agentcoordd: the page's stop request is what the lane's agent is
    told at its next ctl call (and what `wait --until-stop-requested` waits for)."""
    with running_daemon() as d:
        _wave(d)
        _open_wave(driver, d)

        driver.find_element("id", "stop-message").send_keys("Restart with smaller lanes.")
        driver.find_element("id", "stop-button").click()
        wait_for(driver, "return document.querySelector('#batch-events tr.event[data-type=\"batch.stop_requested\"]')")

        assert driver.find_element("id", "stop-result").text.startswith("stop requested (")
        beat = ok(d.ctl("heartbeat", "--agent-id", "worker-parser", "--repo", FLEET_REPO, "--target", "7",
                        "--batch-id", "wave-9", "--json"))
        assert "agentcoord: batch wave-9 has a stop request" in beat.stderr.decode()
        assert "Restart with smaller lanes." in beat.stderr.decode()
        assert json.loads(beat.stdout)["stop_requested"] is True
        ok(d.ctl("wait", "--until-stop-requested", "--batch-id", "wave-9", "--timeout", "5"))


def test_the_overview_summary_names_an_effective_host_limit(driver: Any, served: Served, clock) -> None:  # noqa: ANN001
    generate(served.root, "batch-demo-5", 5, clock.now())
    LocalStore(served.root).write_sync("host_limits/default/box-2/claude-max/5h.json", {
        "schema_version": 1, "workspace": "default", "machine": "box-2", "quota_host": "claude-max",
        "scope": "5h", "status": "active", "observed_at": "2026-06-13T00:00:00Z",
        "resets_at": "2026-06-13T05:00:00Z", "source": "manual"}, None)
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '5'")
    summary = driver.find_element("id", "summary").text
    assert "host limits: claude-max/5h on box-2 until 2026-06-13T05:00:00Z" in summary
