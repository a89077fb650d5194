"""The batch's own records through the real daemon on a local root: usage reports
(upserted per model, unknown kept unknown in every total), read back in
`status --batch-id --json` and the dashboard's overview API, each stored record
valid under `agentcoordctl validate`."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .helpers import Daemon

REPO = "acme/widgets"
BATCH = "b1"
LANES = [
    {"name": "backend", "owner": "agent-a", "targets": ["11"], "route": "gpt-5.6-sol/xhigh"},
    {"name": "frontend", "owner": "agent-b", "targets": ["12"]},
]


def register(d: Daemon, **extra: Any) -> None:
    path = d.base / "batch.json"
    path.write_text(json.dumps({"batch_id": BATCH, "repo": REPO, "lanes": LANES, **extra}))
    result = d.ctl("register-batch", "--file", str(path))
    assert result.returncode == 0, result.stderr


def report(d: Daemon, lane: str, agent: str, target: str, model: str, *metrics: str):  # noqa: ANN201
    return d.ctl("usage", "record", "--batch-id", BATCH, "--lane", lane, "--agent-id", agent,
                 "--repo", REPO, "--target", target, "--model", model, *metrics, "--json")


def batch_status(d: Daemon) -> dict[str, Any]:
    result = d.ctl("status", "--batch-id", BATCH, "--json")
    assert result.returncode == 0, result.stderr
    (batch,) = json.loads(result.stdout)["batches"]
    return batch


def overview_batch(d: Daemon) -> dict[str, Any]:
    shown = d.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    port = json.loads(shown.stdout)["port"]
    response = httpx.get(f"http://127.0.0.1:{port}/api/overview", headers=d.dashboard_headers(),
                         timeout=30)
    assert response.status_code == 200, response.text
    (batch,) = [b for b in response.json()["batches"] if b["batch_id"] == BATCH]
    return batch


def validate(d: Daemon, family: str, record: Any) -> None:
    result = d.ctl("validate", "--family", family, "-", input=json.dumps(record).encode())
    assert result.returncode == 0, (record, result.stdout, result.stderr)


def test_usage_reports_total_per_model_and_batch_with_unknown_kept_unknown(daemon: Daemon) -> None:
    register(daemon)
    assert report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "1000",
                  "--output-tokens", "200", "--cost", "0.5").returncode == 0
    assert report(daemon, "frontend", "agent-b", "12", "gpt-5.6", "--input-tokens", "10",
                  "--output-tokens", "unknown").returncode == 0
    assert report(daemon, "frontend", "agent-b", "12", "claude-x", "--input-tokens", "7").returncode == 0

    totals = batch_status(daemon)["usage_totals"]

    assert totals["tokens_by_model"] == {
        "gpt-5.6": {"input_tokens": 1010, "output_tokens": 200, "cost": 0.5},
        "claude-x": {"input_tokens": 7, "output_tokens": None, "cost": None},
    }
    assert totals["batch_totals"] == {"input_tokens": 1017, "output_tokens": 200, "cost": 0.5}
    assert (totals["records_with_unknown_metrics"], totals["currency"]) == (2, "USD")
    assert overview_batch(daemon)["usage_totals"] == totals


def test_a_later_report_for_the_same_key_replaces_the_earlier_one(daemon: Daemon) -> None:
    register(daemon)
    first = report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "5")
    second = report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "9",
                    "--cost", "0")

    assert (json.loads(first.stdout)["replaced"], json.loads(second.stdout)["replaced"]) == (False, True)
    stored = json.loads((daemon.root / "batches" / f"{BATCH}.json").read_text())["usage"]
    assert [(r["input_tokens"], r["cost"]) for r in stored] == [(9, 0.0)]
    validate(daemon, "usage", stored[0])
    assert batch_status(daemon)["usage_totals"]["batch_totals"]["cost"] == 0  # a true zero


def test_all_unknown_usage_stays_unknown_never_zero(daemon: Daemon) -> None:
    register(daemon)
    result = report(daemon, "backend", "agent-a", "11", "gpt-5.6")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)["record"]
    assert (record["input_tokens"], record["output_tokens"], record["cost"]) == (None, None, None)
    validate(daemon, "usage", record)
    assert batch_status(daemon)["usage_totals"]["batch_totals"] == {
        "input_tokens": None, "output_tokens": None, "cost": None}


def test_usage_for_an_unknown_lane_or_batch_or_bad_metric_is_exit_1_in_one_line(daemon: Daemon) -> None:
    register(daemon)
    cases = [
        (report(daemon, "nope", "agent-a", "11", "m"), f"batch {BATCH} has no lane nope"),
        (daemon.ctl("usage", "record", "--batch-id", "zz", "--lane", "backend", "--agent-id", "a",
                    "--repo", REPO, "--target", "1", "--model", "m"), "batch zz not found"),
        (report(daemon, "backend", "agent-a", "11", "m", "--input-tokens", "1.5"), "--input-tokens"),
        (report(daemon, "backend", "agent-a", "11", "m", "--cost", "-1"), "--cost"),
    ]
    for result, words in cases:
        err = result.stderr.decode()
        assert (result.returncode, len(err.strip().splitlines())) == (1, 1), err
        assert words in err and "Traceback" not in err


def test_re_registration_keeps_the_usage_reported(daemon: Daemon) -> None:
    register(daemon)
    assert report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "3").returncode == 0
    register(daemon, objective="again")
    assert batch_status(daemon)["usage_totals"]["batch_totals"]["input_tokens"] == 3


def test_lane_route_and_merge_authority_show_in_status_and_dashboard(daemon: Daemon) -> None:
    register(daemon, merge_authority="auto_merge_when_gates_pass")
    batch = batch_status(daemon)
    board = overview_batch(daemon)

    assert (batch["merge_authority"], board["merge_authority"]) == ("auto", "auto")
    validate(daemon, "merge_authority", json.loads((daemon.root / "batches" / f"{BATCH}.json").read_text()))
    routes = {lane["name"]: lane.get("route") for lane in board["lanes"]}
    assert routes == {"backend": "gpt-5.6-sol/xhigh", "frontend": None}
    assert [lane.get("route") for lane in batch["lanes"]] == ["gpt-5.6-sol/xhigh", None]


def block(d: Daemon, *extra: str):  # noqa: ANN201
    return d.ctl("batch", "block", "--batch-id", BATCH, "--message", "merge needs a human",
                 "--decision", "merge now", "--decision", "hold", *extra, "--json")


def test_a_blocked_batch_shows_its_panel_in_status_health_and_dashboard(daemon: Daemon) -> None:
    register(daemon)
    result = block(daemon, "--recommended-reply", "hold")
    assert result.returncode == 0, result.stderr
    validate(daemon, "batch_blocker", json.loads(result.stdout)["record"])
    panel = {"message": "merge needs a human", "decisions": ["merge now", "hold"],
             "recommendedReply": "hold"}

    health = json.loads(daemon.ctl("health", "--batch-id", BATCH, "--json").stdout)
    assert batch_status(daemon)["blocker"] == panel
    assert overview_batch(daemon)["blocker"] == panel
    assert [w["blocker"] for w in health["warnings"] if w["signal"] == "batch_blocked"] == [panel]


def test_unblock_records_the_decision_and_who_took_it_from_another_machine(
        daemon_factory: Any) -> None:
    a, b = daemon_factory("a"), daemon_factory("b")
    b.root = a.root
    a.start()
    b.start()
    register(a)
    assert block(a).returncode == 0
    result = b.ctl("batch", "unblock", "--batch-id", BATCH, "--decision", "hold",
                   "--json", env={"AGENT_COORD_MACHINE_ID": "m-b"})
    assert result.returncode == 0, result.stderr

    batch = batch_status(a)
    assert "blocker" not in batch and "blocker" not in overview_batch(a)
    resolution = batch["blocker_resolution"]
    assert (resolution["decision"], resolution["by"]["machine_id"]) == ("hold", "m-b")
    kinds = [e["type"] for e in json.loads(a.ctl("status", "--batch-id", BATCH, "--json").stdout)["events"]]
    assert kinds.count("batch.blocked") == 1 and kinds.count("batch.unblocked") == 1


def test_unblock_refuses_a_decision_not_offered_and_a_batch_not_blocked(daemon: Daemon) -> None:
    register(daemon)
    not_blocked = daemon.ctl("batch", "unblock", "--batch-id", BATCH)
    assert block(daemon).returncode == 0
    wrong = daemon.ctl("batch", "unblock", "--batch-id", BATCH, "--decision", "ship it")
    no_decision = daemon.ctl("batch", "block", "--batch-id", BATCH, "--message", "x")

    assert (not_blocked.returncode, not_blocked.stderr.decode().strip()) == (1, f"batch {BATCH} is not blocked")
    assert wrong.returncode == 1 and "--decision must be one of" in wrong.stderr.decode()
    assert no_decision.returncode == 1 and "--decision" in no_decision.stderr.decode()
    assert batch_status(daemon)["blocker"]["decisions"] == ["merge now", "hold"]


def test_route_rides_on_claim_and_heartbeat_and_shows_as_the_chip(daemon: Daemon) -> None:
    register(daemon)
    claim = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", REPO, "--target", "12",
                       "--batch-id", BATCH, "--route", '{"model": "org/m-1", "effort": "low"}')
    beat = daemon.ctl("heartbeat", "--agent-id", "agent-b", "--repo", REPO, "--target", "12",
                      "--batch-id", BATCH, "--status", "in_progress", "--route", "claude-x/high")
    bad = daemon.ctl("heartbeat", "--agent-id", "agent-b", "--status", "in_progress",
                     "--route", "claude x/high")
    assert (claim.returncode, beat.returncode) == (0, 0), (claim.stderr, beat.stderr)
    assert bad.returncode == 1 and bad.stderr.decode().startswith("--route must be MODEL/EFFORT")

    stored_claim = json.loads((daemon.root / "claims" / "acme" / "widgets" / "12.json").read_text())
    stored_beat = json.loads((daemon.root / "heartbeats" / "agent-b.json").read_text())
    assert stored_claim["route"] == {"model": "org/m-1", "effort": "low"}
    assert stored_beat["route"] == "claude-x/high"
    validate(daemon, "route", {"route": stored_claim["route"]})
    rows = {lane["name"]: lane for lane in overview_batch(daemon)["lanes"]}
    assert (rows["backend"]["route"], rows["frontend"]["route"]) == ("gpt-5.6-sol/xhigh", "claude-x/high")
    text = daemon.ctl("status", "--batch-id", BATCH).stdout.decode()
    assert "lane backend owner agent-a targets 11 " in text and " route gpt-5.6-sol/xhigh" in text


def test_status_text_shows_merge_authority_blocker_and_usage_with_unknown_words(daemon: Daemon) -> None:
    register(daemon, merge_authority="ask")
    assert report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "4").returncode == 0
    assert block(daemon).returncode == 0

    text = daemon.ctl("status", "--batch-id", BATCH).stdout.decode().splitlines()

    assert f"- {BATCH} merge_authority ask" in text
    assert "  - blocked: merge needs a human decisions merge now; hold" in text
    assert "  - usage gpt-5.6 input 4 output unknown cost USD unknown" in text
    assert "  - usage total input 4 output unknown cost USD unknown" in text


def close(d: Daemon, lane: str, agent: str, target: str, *extra: str):  # noqa: ANN201
    return d.ctl("record-event", "--batch-id", BATCH, "--type", "lane_closed", "--lane", lane,
                 "--agent-id", agent, "--repo", REPO, "--target", target, "--terminal", "done",
                 *extra, env={"AGENT_COORD_MACHINE_ID": "m1"})


def test_the_last_closeout_writes_the_completion_report_with_the_usage_totals(daemon: Daemon) -> None:
    register(daemon)
    assert report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "100",
                  "--output-tokens", "20", "--cost", "0.25").returncode == 0
    assert report(daemon, "frontend", "agent-b", "12", "claude-x", "--input-tokens", "5").returncode == 0
    assert close(daemon, "backend", "agent-a", "11",
                 "--evidence-url", "https://ci.example/run/1").returncode == 0
    assert "completion" not in batch_status(daemon)  # one lane still open
    assert close(daemon, "frontend", "agent-b", "12").returncode == 0

    record = batch_status(daemon)["completion"]

    validate(daemon, "batch_completion", record)
    c = record["completion"]
    assert record["audit"]["verdict"] in ("clean", "findings")
    assert record["audit"]["author"].startswith("agentcoordd · v")
    assert c["receipts"] == [{"k": "backend", "v": "done", "href": "https://ci.example/run/1"},
                             {"k": "frontend", "v": "done"}]
    assert [(o["lane"], o.get("route")) for o in c["outcomes"]] == [
        ("backend", "gpt-5.6-sol/xhigh"), ("frontend", None)]
    # unknown cost of claude-x stays out of the sum, not a 0; output known only for gpt-5.6
    assert (c["usage"], c["tokensTotal"], c["cost"]) == ({"input": 105, "output": 20}, 125, 0.25)
    assert record["finalReport"] == f"batch {BATCH} completed: 2 done"
    assert overview_batch(daemon)["completion"] == record


def test_batch_complete_is_idempotent_and_takes_the_operators_report(daemon: Daemon) -> None:
    register(daemon)
    first = daemon.ctl("batch", "complete", "--batch-id", BATCH, "--json")
    again = daemon.ctl("batch", "complete", "--batch-id", BATCH, "--json")
    (daemon.base / "report.md").write_text("wave done; frontend deferred")
    told = daemon.ctl("batch", "complete", "--batch-id", BATCH, "--report", str(daemon.base / "report.md"),
                      "--json")

    assert (first.returncode, again.returncode, told.returncode) == (0, 0, 0), told.stderr
    one, two, three = (json.loads(r.stdout) for r in (first, again, told))
    assert (one["action"], two["action"], three["action"]) == ("written", "exists", "written")
    assert two["record"] == one["record"]
    assert one["record"]["audit"]["verdict"] == "findings"  # lanes still open: batch-audit incomplete
    assert one["record"]["completion"]["receipts"] == [{"k": "manifest", "v": f"batches/{BATCH}.json"}]
    assert (one["record"]["completion"]["usage"], one["record"]["completion"]["cost"]) == (None, None)
    assert three["record"]["finalReport"] == "wave done; frontend deferred"
    validate(daemon, "batch_completion", three["record"])
    missing = daemon.ctl("batch", "complete", "--batch-id", "nope")
    assert (missing.returncode, missing.stderr.decode().strip()) == (1, "batch nope not found (register it first)")


def test_a_fleet_day_of_batch_records_across_two_machines(daemon_factory: Any) -> None:
    """Two agents on two machines report usage for two models (one cost unknown), a
    lane carries a route, the batch blocks and is unblocked from the other machine,
    and completes: status, the overview API and the completion record say exactly that."""
    a, b = daemon_factory("a"), daemon_factory("b")
    b.root = a.root
    for d, machine in ((a, "m-a"), (b, "m-b")):
        d.extra_env["AGENT_COORD_MACHINE_ID"] = machine
        d.start()
    register(a, merge_authority="auto_merge_when_gates_pass")
    assert b.ctl("claim", "--agent-id", "agent-b", "--repo", REPO, "--target", "12", "--batch-id", BATCH,
                 "--route", "claude-x/medium").returncode == 0
    assert report(a, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "3000",
                  "--output-tokens", "400", "--cost", "2.25").returncode == 0
    assert report(b, "frontend", "agent-b", "12", "claude-x", "--input-tokens", "800",
                  "--output-tokens", "90", "--cost", "unknown").returncode == 0
    assert block(a, "--recommended-reply", "hold").returncode == 0
    mid = overview_batch(b)
    assert mid["blocker"]["recommendedReply"] == "hold"
    assert b.ctl("batch", "unblock", "--batch-id", BATCH, "--decision", "merge now",
                 "--agent-id", "operator-1").returncode == 0
    for d, lane, agent, target in ((a, "backend", "agent-a", "11"), (b, "frontend", "agent-b", "12")):
        assert d.ctl("record-event", "--batch-id", BATCH, "--type", "lane_closed", "--lane", lane,
                     "--agent-id", agent, "--repo", REPO, "--target", target,
                     "--terminal", "done").returncode == 0

    board = overview_batch(a)
    record = board["completion"]

    assert "blocker" not in board
    assert board["blocker_resolution"]["by"] == {"daemon": "agentcoordd", "machine_id": "m-b",
                                                 "agent_id": "operator-1"}
    assert board["merge_authority"] == "auto"
    assert {lane["name"]: lane.get("route") for lane in board["lanes"]} == {
        "backend": "gpt-5.6-sol/xhigh", "frontend": "claude-x/medium"}
    assert board["usage_totals"]["tokens_by_model"]["claude-x"]["cost"] is None
    assert board["usage_totals"]["batch_totals"] == {"input_tokens": 3800, "output_tokens": 490, "cost": 2.25}
    validate(a, "batch_completion", record)
    assert (record["completion"]["tokensTotal"], record["completion"]["cost"]) == (4290, 2.25)
    assert [o["lane"] for o in record["completion"]["outcomes"]] == ["backend", "frontend"]
    assert batch_status(b)["completion"] == record


def test_gc_keeps_a_completed_batch_with_its_records_hot_then_archives_them_with_it(daemon: Daemon) -> None:
    register(daemon)
    assert report(daemon, "backend", "agent-a", "11", "gpt-5.6", "--input-tokens", "3").returncode == 0
    for lane, agent, target in (("backend", "agent-a", "11"), ("frontend", "agent-b", "12")):
        assert close(daemon, lane, agent, target).returncode == 0
    path = daemon.root / "batches" / f"{BATCH}.json"
    fresh = json.loads(path.read_text())
    assert fresh["status"] == "completed" and "completion" in fresh and fresh["usage"]

    assert daemon.ctl("gc", "--execute").returncode == 0
    assert json.loads(path.read_text()) == fresh  # completed today: hot, records and all
    aged = dict(fresh, completed_at="2020-01-01T00:00:00Z")
    path.write_text(json.dumps(aged))
    result = daemon.ctl("gc", "--execute")
    assert result.returncode == 0, result.stderr

    assert not path.exists()
    archived = json.loads((daemon.root / "archive" / "batches" / f"{BATCH}.json").read_text())["data"]
    assert (archived["usage"], archived["completion"]) == (fresh["usage"], fresh["completion"])
