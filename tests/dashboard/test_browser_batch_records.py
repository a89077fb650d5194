"""The batch's own records as the dashboard draws them, in headless Chromium: the
usage tiles (unknown stays —), the route chips and the Blocker panels of the
contracts' replay fixtures (schema/state/v1/*/fixtures/replay/), the Merge auth
field, and the completion drawer. Screenshots go to the run's artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_browser import Served, driver, served, wait_for  # noqa: F401 - fixtures

from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.blockers import block
from agentcoordd.coord.completion import complete
from agentcoordd.coord.usage import record_usage

REPLAY = Path(__file__).resolve().parents[2] / "schema" / "state" / "v1"
REPO = "acme/widgets"


def replay(name: str) -> dict[str, Any]:
    return json.loads((REPLAY / name).read_text())


def text_of(driver: Any, selector: str) -> list[str]:  # noqa: F811
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.trim())", selector)


def register(served: Served, batch: str, lanes: list[dict[str, Any]], **extra: Any) -> None:  # noqa: F811
    manifest = {"batch_id": batch, "repo": REPO, "lanes": lanes, **extra}
    served.portal.call(lambda: register_batch(served.ctx, manifest=json.dumps(manifest).encode()))


def test_route_chips_and_merge_auth_match_the_replay_fixtures(driver: Any, served: Served,  # noqa: F811
                                                              screenshots: Any) -> None:
    fixture = replay("route/fixtures/replay/route-chips-both-forms-agree.json")
    lanes = [{"name": row["lane"], "owner": f"w-{row['lane']}", "targets": [str(i + 1)],
              **({"route": row["route"]} if "route" in row else {})}
             for i, row in enumerate(fixture["lanes"])]
    drawer = replay("merge-authority/fixtures/replay/merge-authority-drawer-absent-vs-none.json")
    for batch, shown in drawer["expected"]["drawer"].items():
        extra = {} if shown == "—" else {"merge_authority": shown}
        register(served, batch, lanes, **extra)

    driver.get(served.url)
    wait_for(driver, f"return document.body.dataset.renderedLanes === '{4 * len(drawer['expected']['drawer'])}'")

    chips = driver.execute_script(
        "const b = document.querySelector(`.batch[data-batch='wave-9']`);"
        "return Object.fromEntries([...b.querySelectorAll('tr.lane')].map(r => "
        "[r.dataset.lane.split(':')[1], (r.querySelector('.chip.route') || {textContent: 'hidden'}).textContent]))")
    assert chips == fixture["expected"]["chips"]
    auth = {b: text_of(driver, f".batch[data-batch='{b}'] .tile.merge-auth strong")[0]
            for b in drawer["expected"]["drawer"]}
    assert auth == drawer["expected"]["drawer"]
    screenshots.save(driver, "batch-records-route-chips.png")


def test_blocker_panels_match_the_replay_fixture(driver: Any, served: Served, screenshots: Any) -> None:  # noqa: F811
    fixture = replay("batch-blocker/fixtures/replay/blocker-panels.json")
    lanes = [{"name": "api", "owner": "w-a", "targets": ["1"]}]
    for i, case in enumerate(fixture["records"]):
        batch = f"blocked-{i}"
        register(served, batch, lanes)
        b = case["record"]["blocker"]
        served.portal.call(lambda: block(served.ctx, batch_id=batch, message=b["message"],
                                         decisions=b["decisions"], recommended_reply=b.get("recommendedReply")))

    driver.get(served.url)
    wait_for(driver, "return document.querySelectorAll('.blocker-panel').length === 2")

    for i, case in enumerate(fixture["records"]):
        panel = case["expected_panel"]
        scope = f".batch[data-batch='blocked-{i}'] .blocker-panel"
        assert text_of(driver, f"{scope} li.decision") == panel["decisions"]
        assert panel["message"] in text_of(driver, scope)[0]
        recommended = text_of(driver, f"{scope} .recommended")
        assert recommended == ([f"Recommended: {panel['recommendedReply']}"] if panel["recommendedReply"] else [])
    screenshots.save(driver, "batch-records-blocker-panels.png")


def test_usage_tiles_and_completion_drawer_keep_unknown_unknown(driver: Any, served: Served,  # noqa: F811
                                                                screenshots: Any) -> None:
    lanes = [{"name": "api", "owner": "w-a", "targets": ["1"], "route": "gpt-5.6/high"},
             {"name": "ui", "owner": "w-b", "targets": ["2"]}]
    register(served, "wave-1", lanes, merge_authority="auto")
    for lane, agent, target, model, metrics in (
            ("api", "w-a", "1", "gpt-5.6", {"input_tokens": 1000, "output_tokens": 200, "cost": 0.5}),
            ("ui", "w-b", "2", "claude-x", {"input_tokens": 40})):
        served.portal.call(lambda: record_usage(served.ctx, batch_id="wave-1", lane=lane, agent_id=agent,
                                                repo=REPO, target=target, model=model, **metrics))
    served.portal.call(lambda: complete(served.ctx, batch_id="wave-1", report="wave-1 landed."))

    driver.get(served.url)
    wait_for(driver, "return document.querySelector('.completion-drawer summary')")
    driver.find_element("css selector", ".completion-drawer summary").click()

    assert text_of(driver, ".tile.tokens strong") == ["1240"]
    assert text_of(driver, ".tile.cost strong") == ["$0.5"]  # claude-x's unknown cost is not a 0
    assert text_of(driver, ".tile.models .model") == ["claude-x: 40 (—)", "gpt-5.6: 1200 ($0.5)"]
    assert text_of(driver, ".tile.merge-auth strong") == ["auto"]
    assert text_of(driver, ".completion-drawer .m-usage") == ["in 1040 · out 200"]
    assert text_of(driver, ".completion-drawer .m-cost") == ["$0.5"]
    assert text_of(driver, ".completion-drawer .final-report") == ["wave-1 landed."]
    assert text_of(driver, ".completion-drawer tr.outcome td:first-child") == ["api", "ui"]
    assert text_of(driver, ".completion-drawer tr.outcome td:nth-child(3)") == ["gpt-5.6/high", ""]
    screenshots.save(driver, "batch-records-tiles-and-drawer.png")


def test_a_batch_without_usage_shows_dashes_not_zeros(driver: Any, served: Served) -> None:  # noqa: F811
    register(served, "wave-2", [{"name": "api", "owner": "w-a", "targets": ["1"]}])
    driver.get(served.url)
    wait_for(driver, "return document.body.dataset.renderedLanes === '1'")

    assert text_of(driver, ".tile.tokens strong") == ["—"]
    assert text_of(driver, ".tile.cost strong") == ["—"]
    assert text_of(driver, ".tile.merge-auth strong") == ["—"]
    assert text_of(driver, ".chip.route") == [] and text_of(driver, ".blocker-panel") == []
