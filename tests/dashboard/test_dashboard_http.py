"""The dashboard over real HTTP on loopback: API shapes, the writes, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import httpx
import pytest

from agentcoordd.coord import events
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.dashboard import Dashboard, peer_allowed
from agentcoordd.model.identity import Identity
from agentcoordd.store.local import LocalStore
from dashstate import REPO, generate

PROMPT = (
    "Use $pr-batch to complete this batch with subagents.\n\n"
    f"Repository: {REPO}\nBatch id: batch-imported-1\nBatch objective: Ship the importer.\n\n"
    "Lanes:\n- api: owner worker-a, PR #4005, branch jg/api\n"
    "- docs: owner worker-b, issue https://github.com/o/r/issues/4010, depends on api\n\n"
    "Reservations:\n- PR 3999 deferred for release owner review.\n"
)


def _client(board: Dashboard, **kwargs) -> httpx.AsyncClient:  # noqa: ANN003
    """A client of the daemon's user: it sends the token."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{board.port}", timeout=10,
                             headers={"Authorization": f"Bearer {board.token}"}, **kwargs)


def _write_headers(board: Dashboard, **override: str) -> dict[str, str]:
    headers = {"Origin": f"http://127.0.0.1:{board.port}", "X-Agentcoord-CSRF": board.csrf_token}
    headers.update(override)
    return {k: v for k, v in headers.items() if v}


async def test_page_embeds_the_csrf_token_and_loads_only_local_assets(dashboard: Dashboard) -> None:
    async with _client(dashboard) as client:
        page = await client.get("/")
        script = await client.get("/static/app.js")

    assert page.status_code == 200
    assert dashboard.csrf_token in page.text
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)  # nothing from elsewhere
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "X-Agentcoord-CSRF" in script.text


async def test_overview_shape(dashboard: Dashboard, root: Path, clock) -> None:  # noqa: ANN001
    generate(root, "b-gen", 8, clock.now())

    async with _client(dashboard) as client:
        data = (await client.get("/api/overview")).json()

    (batch,) = data["batches"]
    assert batch["batch_id"] == "b-gen" and batch["repo"] == REPO and len(batch["lanes"]) == 8
    lane = batch["lanes"][0]
    assert {"name", "owner", "lane_state", "holder", "since", "machine", "host", "phase", "status",
            "liveness", "blocked_on", "pr", "qa"} <= set(lane)
    assert lane["pr"] == "1000" and lane["qa"] == "passed" and lane["liveness"] == "live"
    # each lane from its own claim: a holder's liveness, and none without a holder
    assert [(lane["lane_state"], lane.get("liveness")) for lane in batch["lanes"][:4]] == [
        ("held", "live"), ("stale_holder", "stale"), ("dead_holder", "dead"), ("not_started", None)]
    assert batch["lanes"][3]["status"] == "not started" and "holder" not in batch["lanes"][3]
    assert batch["lanes"][5]["blocked_on"] == ["b-gen:l4"]
    assert batch["stop"] == {"batch_id": "b-gen", "stop_requested": False, "stopped": False}
    assert len(data["claims"]) == 6 and len(data["heartbeats"]) == 6


async def test_batch_health_history_and_search_endpoints(dashboard: Dashboard, root: Path, clock) -> None:  # noqa: ANN001
    generate(root, "b-gen", 6, clock.now())

    async with _client(dashboard) as client:
        detail = (await client.get("/api/batch", params={"batch_id": "b-gen"})).json()
        health = (await client.get("/api/health")).json()
        history = (await client.get("/api/history", params={"batch_id": "b-gen", "limit": "3"})).json()
        by_pr = (await client.get("/api/search", params={"q": "#1004"})).json()
        by_branch = (await client.get("/api/search", params={"q": "feature/pr-1002"})).json()
        by_thread = (await client.get("/api/search", params={"q": "thread-b-gen-1"})).json()
        missing = await client.get("/api/batch")

    assert detail["status"]["batches"][0]["batch_id"] == "b-gen"
    assert len(detail["history"]["events"]) == 8  # 6 lane.started + 2 QA events
    assert detail["stop"]["stop_requested"] is False
    assert sorted((w["lane"], w["signal"]) for w in health["warnings"]) == [
        ("l1", "stale_holder"), ("l2", "dead_holder"), ("l3", "lane_without_heartbeat"),
        ("l5", "stale_holder")]
    assert health["exit_code"] == 1
    assert len(history["events"]) == 3 and history["omitted"] == 5
    assert [lane["name"] for lane in by_pr["lanes"]] == ["l4"]
    assert [lane["name"] for lane in by_branch["lanes"]] == ["l2"]
    assert [lane["name"] for lane in by_thread["lanes"]] == ["l1"]
    assert missing.status_code == 400


async def test_import_writes_only_the_manifest(dashboard: Dashboard, root: Path) -> None:
    async with _client(dashboard) as client:
        preview = await client.post("/api/import", json={"launch_prompt": PROMPT, "dry_run": True},
                                    headers=_write_headers(dashboard))
        assert not (root / "batches").exists()
        written = await client.post("/api/import", json={"launch_prompt": PROMPT}, headers=_write_headers(dashboard))
        again = await client.post("/api/import", json={"launch_prompt": PROMPT}, headers=_write_headers(dashboard))

    assert preview.status_code == 200 and preview.json()["written"] is False
    assert written.status_code == 201, written.text
    assert again.status_code == 409
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    assert files == ["batches/batch-imported-1.json"]
    manifest = json.loads((root / "batches" / "batch-imported-1.json").read_text())
    assert manifest["launch_prompt"] == PROMPT
    assert manifest["repo"] == REPO and manifest["objective"] == "Ship the importer."
    assert manifest["created_by_machine"] == "ws-1"
    assert [(lane["name"], lane["owner"], lane["targets"]) for lane in manifest["lanes"]] == [
        ("api", "worker-a", ["4005"]), ("docs", "worker-b", ["4010"])]
    assert manifest["lanes"][1]["depends_on"] == ["batch-imported-1:api"]
    assert [t["target"] for t in manifest["targets"]] == ["4005", "4010"]
    assert manifest["reservations"][0]["target"] == "3999"


async def test_import_of_a_prompt_without_batch_id_is_a_400(dashboard: Dashboard) -> None:
    async with _client(dashboard) as client:
        response = await client.post("/api/import", json={"launch_prompt": "fix PR #1"}, headers=_write_headers(dashboard))

    assert response.status_code == 400 and "batch id" in response.json()["error"]


async def test_stop_request_appends_one_event_only(dashboard: Dashboard, root: Path, clock) -> None:  # noqa: ANN001
    generate(root, "b-gen", 2, clock.now())
    before = {p: p.read_bytes() for p in root.rglob("*.json")}

    async with _client(dashboard) as client:
        response = await client.post("/api/stop", json={"batch_id": "b-gen", "message": "restart smaller"},
                                     headers=_write_headers(dashboard))
        detail = (await client.get("/api/batch", params={"batch_id": "b-gen"})).json()

    assert response.status_code == 201, response.text
    after = {p: p.read_bytes() for p in root.rglob("*.json")}
    new = sorted(set(after) - set(before))
    assert [str(p.relative_to(root)).split("/")[:2] for p in new] == [["events", "b-gen"]]
    assert all(after[p] == before[p] for p in before)  # nothing else touched
    event = json.loads(after[new[0]])
    assert event["type"] == "batch.stop_requested" and event["message"] == "restart smaller"
    assert detail["stop"]["stop_requested"] is True


async def _ask(root: Path, clock, batch: str = "b-gen") -> str:  # noqa: ANN001
    """A help request in `batch` (recorded like `record-event` does); its event id."""
    asked = await events.record_event(
        Ctx(LocalStore(root), clock, Identity(machine_id="box-1")), batch_id=batch,
        type="help_requested", lane="l1", agent_id="w-b-gen-1", message="which database?",
        typed={"reason": "question"})
    return asked["event"]["event_id"]


async def test_answer_appends_one_answer_event_and_the_request_is_no_longer_open(
        dashboard: Dashboard, root: Path, clock) -> None:  # noqa: ANN001
    generate(root, "b-gen", 2, clock.now())
    asked = await _ask(root, clock)
    before = {p: p.read_bytes() for p in root.rglob("*.json")}

    async with _client(dashboard) as client:
        opened = (await client.get("/api/batch", params={"batch_id": "b-gen"})).json()
        response = await client.post("/api/answer", headers=_write_headers(dashboard), json={
            "batch_id": "b-gen", "to_event": asked, "message": "use staging", "decision": "proceed",
            "agent_id": "lead"})
        detail = (await client.get("/api/batch", params={"batch_id": "b-gen"})).json()

    assert [r["event_id"] for r in opened["status"]["open_requests"]] == [asked]
    assert response.status_code == 201, response.text
    after = {p: p.read_bytes() for p in root.rglob("*.json")}
    (new,) = sorted(set(after) - set(before))
    assert all(after[p] == before[p] for p in before)  # nothing else touched
    event = json.loads(after[new])
    assert (event["type"], event["reply_to"], event["message"], event["decision"]) == (
        "help_answered", asked, "use staging", "proceed")
    # stamped like `agentcoordctl answer`: waiters take it
    assert event["written_by"] == {"daemon": "agentcoordd", "machine_id": "ws-1", "agent_id": "lead"}
    assert response.json()["event"]["event_id"] == event["event_id"]
    assert "open_requests" not in detail["status"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"batch_id": "b-gen", "to_event": "ASKED"}, "message is required"),
        ({"batch_id": "b-gen", "to_event": "ASKED", "message": "   "}, "message is required"),
        ({"batch_id": "b-gen", "to_event": "ASKED", "message": 42}, "message must be a string"),
        ({"batch_id": "b-gen", "message": "yes"}, "to_event is required"),
        ({"to_event": "ASKED", "message": "yes"}, "batch_id is required"),
        ({"batch_id": "b-gen", "to_event": "ASKED", "message": "yes", "decision": ["x"]},
         "decision must be a string"),
        ({"batch_id": "b-gen", "to_event": "no-such-event", "message": "yes"}, "no event no-such-event"),
        ({"batch_id": "b-gen", "to_event": "../../batches/b-gen", "message": "yes"}, "event"),
        ({"batch_id": "../etc", "to_event": "ASKED", "message": "yes"}, "batch"),
        ({"batch_id": "b-other", "to_event": "ASKED", "message": "yes"}, "no event"),
        ({"batch_id": "b-gen", "to_event": "LANE_STARTED", "message": "yes"}, "nothing to answer"),
        ({"batch_id": "b-gen", "to_event": "ASKED", "message": "x" * 70_000}, "too long"),
        ([], "body must be a JSON object"),
        ("not json", "body is not valid JSON"),
    ],
    ids=["no-message", "blank-message", "number-message", "no-event", "no-batch", "list-decision",
         "unknown-event", "path-event", "path-batch", "other-batch", "not-a-request", "huge-message",
         "array-body", "not-json"],
)
async def test_a_bad_answer_is_a_400_with_a_one_line_error_and_writes_nothing(
        dashboard: Dashboard, root: Path, clock, body: object, error: str) -> None:  # noqa: ANN001
    generate(root, "b-gen", 2, clock.now())
    asked = await _ask(root, clock)
    started = next(p.stem for p in (root / "events" / "b-gen").glob("*.json")
                   if json.loads(p.read_text())["type"] == "lane.started")
    if isinstance(body, dict):
        body = {k: v.replace("ASKED", asked).replace("LANE_STARTED", started) if isinstance(v, str) else v
                for k, v in body.items()}
    before = sorted(root.rglob("*.json"))

    async with _client(dashboard) as client:
        response = await client.post("/api/answer", headers=_write_headers(dashboard, **{
            "Content-Type": "application/json"}),
            content=body.encode() if isinstance(body, str) else json.dumps(body).encode())

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    message = response.json()["error"]
    assert error in message and "\n" not in message and "Traceback" not in message
    assert sorted(root.rglob("*.json")) == before


@pytest.mark.parametrize(
    ("override", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": ""}, 403),  # missing Origin
        ({"Origin": "http://127.0.0.1:1"}, 403),  # another local port is another origin
        ({"X-Agentcoord-CSRF": ""}, 403),  # missing token
        ({"X-Agentcoord-CSRF": "wrong"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
    ],
    ids=["foreign-origin", "no-origin", "other-port", "no-csrf", "bad-csrf", "cross-site"],
)
async def test_writes_without_same_origin_and_token_are_refused(
    dashboard: Dashboard, root: Path, override: dict[str, str], status: int
) -> None:
    async with _client(dashboard) as client:
        stop = await client.post("/api/stop", json={"batch_id": "b1"}, headers=_write_headers(dashboard, **override))
        imp = await client.post("/api/import", json={"launch_prompt": PROMPT}, headers=_write_headers(dashboard, **override))
        answer = await client.post("/api/answer", json={"batch_id": "b1", "to_event": "e1", "message": "m"},
                                   headers=_write_headers(dashboard, **override))

    assert (stop.status_code, imp.status_code, answer.status_code) == (status, status, status)
    assert list(root.rglob("*.json")) == []


async def test_writes_must_be_json(dashboard: Dashboard, root: Path) -> None:
    async with _client(dashboard) as client:
        response = await client.post("/api/stop", content=b"batch_id=b1",
                                     headers=_write_headers(dashboard, **{"Content-Type": "application/x-www-form-urlencoded"}))

    assert response.status_code == 415
    assert list(root.rglob("*.json")) == []


async def test_a_foreign_host_header_is_refused(dashboard: Dashboard) -> None:
    """DNS rebinding: a page on evil.example resolved to 127.0.0.1 cannot read the API."""
    async with _client(dashboard) as client:
        response = await client.get("/api/overview", headers={"Host": f"evil.example:{dashboard.port}"})

    assert response.status_code == 403


def test_peer_check_accepts_loopback_only() -> None:
    assert peer_allowed("127.0.0.1") and peer_allowed("127.0.0.2") and peer_allowed("::1")
    assert peer_allowed("::ffff:127.0.0.1")
    assert not peer_allowed("10.0.0.5")
    assert not peer_allowed("192.168.1.20")
    assert not peer_allowed("::ffff:10.0.0.5")
    assert not peer_allowed("")
    assert not peer_allowed("127.0.0.2", ["127.0.0.1/32"])


async def test_a_peer_outside_the_allowed_set_is_refused_for_real(root: Path, clock) -> None:  # noqa: ANN001
    """Bound to 127.0.0.1 but allowing only 127.0.0.1/32: a real connection from
    127.0.0.2 is a peer outside the set, exactly as a non-loopback one would be."""
    board = Dashboard(lambda: LocalStore(root), clock, Identity(), allowed_peers=["127.0.0.1/32"])
    async with anyio.create_task_group() as tg:
        await tg.start(board.serve)
        headers = _write_headers(board)
        outside = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with _client(board, transport=outside) as client:
            refused = await client.post("/api/stop", json={"batch_id": "b1"}, headers=headers)
            read = await client.get("/api/overview")
        async with _client(board) as client:
            allowed = await client.post("/api/stop", json={"batch_id": "b1"}, headers=headers)
        tg.cancel_scope.cancel()

    assert refused.status_code == 403 and "not an allowed" in refused.json()["error"]
    assert read.status_code == 403
    assert allowed.status_code == 201


async def test_the_dashboard_refuses_to_bind_a_non_loopback_address(root: Path, clock) -> None:  # noqa: ANN001
    from agentcoordd.model.errors import UsageError

    board = Dashboard(lambda: LocalStore(root), clock)
    with pytest.raises(UsageError):
        await board.serve("0.0.0.0")


async def test_overview_carries_the_host_limits(dashboard: Dashboard, root: Path, clock) -> None:  # noqa: ANN001
    from agentcoordd.coord import host_limits

    machine = Ctx(LocalStore(root), clock, identity=Identity(machine_id="ws-2"))
    await host_limits.report(machine, workspace="default", quota_host="claude-max", scope="5h",
                             resets_at="2026-06-13T05:00:00Z")
    async with _client(dashboard) as client:
        data = (await client.get("/api/overview")).json()
    assert [(r["quota_host"], r["machine"], r["resets_at"], r["effective"])
            for r in data["host_limits"]] == [("claude-max", "ws-2", "2026-06-13T05:00:00Z", True)]
