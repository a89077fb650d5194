"""A fleet day, scripted (issue 44): a coordinator registers a batch of pool and owned
lanes; agents on two machines (two daemons on one root) take lanes with `claim --next`; a
help request is answered from the other machine; an agent is SIGKILLed mid-lane; a
follower watches the events. What an operator reads — `status --batch-id --json`,
`health --json`, `/metrics` and the dashboard's overview API — is checked at three
moments: mid-run, right after the kill, after the last closeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .helpers import PYTHON, Daemon, wait_until

REPO = "acme/fleet"
BATCH = "day-1"
PROMPT = (f"Repository: {REPO}\nBatch id: {BATCH}\nEach worker: loop `agentcoordctl claim --next "
          f"--batch-id {BATCH}` until it refuses; heartbeat your phase; close with release --terminal.\n")
MANIFEST = {
    "batch_id": BATCH, "repo": REPO, "objective": "Ship the fleet feature",
    "created_by_machine": "m-a", "launch_prompt": PROMPT,
    "lanes": [
        {"name": "api", "owner": "pool", "pool": True, "targets": ["1"]},
        {"name": "ui", "owner": "pool", "pool": True, "targets": ["2"], "depends_on": f"{BATCH}:api"},
        {"name": "docs", "owner": "w-docs", "targets": ["3"]},
        {"name": "ops", "owner": "w-ops", "targets": ["4"]},
        {"name": "db", "owner": "pool", "pool": True, "targets": ["5"]},
    ],
}
HEARTBEAT_TTL = 2  # the SIGKILLed agent's own heartbeats: stale after 2 s, dead after 8 s


class Fleet:
    """Two machines on one root, the agents' watched processes, a follower."""

    def __init__(self, a: Daemon, b: Daemon) -> None:
        self.a, self.b = a, b
        self.procs: list[subprocess.Popen] = []

    def ctl(self, d: Daemon, *args: str, as_json: bool = True) -> dict[str, Any]:
        machine = "m-a" if d is self.a else "m-b"
        result = d.ctl(*args, *(("--json",) if as_json else ()),
                       env={"AGENT_COORD_MACHINE_ID": machine})
        assert result.returncode == 0, (args, result.stderr.decode())
        return json.loads(result.stdout) if as_json else {}

    def spawn(self, d: Daemon, argv: list[str], stdout: Any = subprocess.DEVNULL) -> subprocess.Popen:
        machine = "m-a" if d is self.a else "m-b"
        proc = subprocess.Popen(argv, env=d.env(AGENT_COORD_MACHINE_ID=machine),
                                stdout=stdout, stderr=subprocess.DEVNULL,
                                cwd=str(d.base), start_new_session=True)
        self.procs.append(proc)
        return proc

    def agent(self, d: Daemon, agent: str) -> dict[str, Any]:
        """An agent process (watched by its daemon) that takes its next lane."""
        body = self.spawn(d, ["sleep", "600"])
        taken = self.ctl(d, "claim", "--next", "--batch-id", BATCH, "--agent-id", agent,
                         "--keep-alive", "--watch-pid", str(body.pid), "--ttl", "60")
        self.ctl(d, "heartbeat", "--agent-id", agent, "--repo", REPO, "--target", taken["target"],
                 "--batch-id", BATCH, "--phase", "implement")
        return taken

    def close(self, d: Daemon, agent: str, target: str) -> None:
        self.ctl(d, "release", "--agent-id", agent, "--repo", REPO, "--target", target,
                 "--terminal", "done", "--host", "codex")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def fleet(daemon_factory: Any) -> Iterator[Fleet]:
    a, b = daemon_factory("a"), daemon_factory("b")
    b.root = a.root
    for d, machine in ((a, "m-a"), (b, "m-b")):
        d.extra_env["AGENT_COORD_MACHINE_ID"] = machine
        d.start()
    made = Fleet(a, b)
    try:
        yield made
    finally:
        made.stop()


def lanes(fleet: Fleet) -> dict[str, dict[str, Any]]:
    (batch,) = fleet.ctl(fleet.a, "status", "--batch-id", BATCH)["batches"]
    return {lane["name"]: lane for lane in batch["lanes"]}


def health(fleet: Fleet) -> dict[str, Any]:
    result = fleet.a.ctl("health", "--batch-id", BATCH, "--json",
                         env={"AGENT_COORD_MACHINE_ID": "m-a"})
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def overview(fleet: Fleet) -> dict[str, dict[str, Any]]:
    shown = fleet.a.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    port = json.loads(shown.stdout)["port"]
    response = httpx.get(f"http://127.0.0.1:{port}/api/overview", headers=fleet.a.dashboard_headers(),
                         timeout=30)
    assert response.status_code == 200, response.text
    (batch,) = [b for b in response.json()["batches"] if b["batch_id"] == BATCH]
    return {lane["name"]: lane for lane in batch["lanes"]}


def gauges(d: Daemon) -> dict[str, Any]:
    """What `/metrics` of one daemon says of the fleet: the batch's lanes by state, its
    open requests and the oldest one's age, the machine (agentcoord_daemon_info)."""
    shown = d.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    port = json.loads(shown.stdout)["port"]
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=d.dashboard_headers(), timeout=30)
    assert response.status_code == 200, response.text
    told: dict[str, Any] = {"lanes": {}}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "agentcoord_batch_lanes" and labels["batch_id"] == BATCH and sample.value:
                told["lanes"][labels["state"]] = sample.value
            elif sample.name in ("agentcoord_open_requests", "agentcoord_open_request_oldest_age_seconds") \
                    and labels["batch_id"] == BATCH:
                told[sample.name.removeprefix("agentcoord_")] = sample.value
            elif sample.name == "agentcoord_daemon_info":
                told["machine"] = labels["machine"]
    return told


def states(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    return {name: (row["lane_state"], (row.get("holder") or {}).get("agent_id")
                   if isinstance(row.get("holder"), dict) else row.get("holder"))
            for name, row in rows.items()}


def text_lanes(fleet: Fleet) -> dict[str, str]:
    """Text `status --batch-id`: each lane's line, by name."""
    result = fleet.a.ctl("status", "--batch-id", BATCH)
    assert result.returncode == 0, result.stderr
    return {line.split()[2]: line.strip() for line in result.stdout.decode().splitlines()
            if line.startswith("  - lane ")}


def signals(report: dict[str, Any], *names: str) -> list[dict[str, Any]]:
    return [w for w in report["warnings"] if w["signal"] in names]


def test_a_fleet_day_told_honestly_at_three_moments(fleet: Fleet) -> None:
    a, b = fleet.a, fleet.b
    manifest = a.base / "batch.json"
    manifest.write_text(json.dumps(MANIFEST))
    fleet.ctl(a, "register-batch", "--file", str(manifest), as_json=False)
    followed = a.base / "followed.jsonl"
    with followed.open("wb") as sink:
        fleet.spawn(b, [PYTHON, "-m", "agentcoordctl.cli", "events", "--batch-id", BATCH, "--follow",
                        "--json"], stdout=sink)

    assert fleet.agent(a, "a1")["lane"] == "api"
    assert fleet.agent(b, "w-docs")["lane"] == "docs"
    assert fleet.agent(b, "a5")["lane"] == "db"
    # w-ops heartbeats by itself (no keep-alive): the agent that will be SIGKILLed
    assert fleet.ctl(a, "claim", "--next", "--batch-id", BATCH, "--agent-id", "w-ops",
                     "--ttl", "600")["lane"] == "ops"
    beats = fleet.spawn(a, ["sh", "-c", f"while :; do {PYTHON} -m agentcoordctl.cli heartbeat "
                                        f"--agent-id w-ops --repo {REPO} --target 4 --batch-id {BATCH} "
                                        f"--phase implement --ttl {HEARTBEAT_TTL}; sleep 0.5; done"])
    wait_until(lambda: lanes(fleet)["ops"].get("holder", {}).get("liveness") == "live", 10)
    asked = fleet.ctl(a, "record-event", "--batch-id", BATCH, "--type", "help_requested",
                      "--reason", "question", "--lane", "api", "--agent-id", "a1",
                      "--message", "which schema?")["event"]["event_id"]
    fleet.ctl(b, "answer", "--batch-id", BATCH, "--to-event", asked, "--message", "v2",
              "--agent-id", "lead")
    still_open = fleet.ctl(b, "record-event", "--batch-id", BATCH, "--type", "help_requested",
                           "--reason", "question", "--lane", "db", "--agent-id", "a5",
                           "--message", "which index?")["event"]["event_id"]

    # ---- moment 1: mid-run --------------------------------------------------------
    rows = lanes(fleet)
    assert states(rows) == {"api": ("held", "a1"), "ui": ("blocked", None), "docs": ("held", "w-docs"),
                            "ops": ("held", "w-ops"), "db": ("held", "a5")}
    assert (rows["api"]["status"], rows["api"]["liveness"]) == ("in_progress", "live")  # the holder's
    assert rows["api"]["holder"]["phase"] == "implement" and rows["api"]["holder"]["fencing_token"]
    assert "holder" not in rows["ui"] and rows["ui"]["blocked_on"] == [f"{BATCH}:api"]
    report = health(fleet)
    assert report["verdict"] == "clean", report["warnings"]  # no wolf cried: pool lanes, claim --next
    board = overview(fleet)
    assert states(board) == states(rows)
    assert board["api"]["liveness"] == "live" and "liveness" not in board["ui"]
    # /metrics: what those views told, on the daemon that computed them, with its machine
    told = gauges(a)
    assert (told["lanes"], told["machine"], told["open_requests"]) == \
        ({"held": 4, "blocked": 1}, "m-a", 1)  # the answered request is not open
    assert 0 <= told["open_request_oldest_age_seconds"] < 60
    # b computed no view of the batch (it answered and took lanes): no fleet gauges there
    assert gauges(b) == {"lanes": {}, "machine": "m-b"}

    # ---- moment 2: right after the kill -------------------------------------------------
    os.killpg(beats.pid, signal.SIGKILL)
    beats.wait()
    stale = wait_until(lambda: (r := lanes(fleet)["ops"])["lane_state"] == "stale_holder" and r, 10)
    assert stale["holder"]["agent_id"] == "w-ops" and stale["holder"]["liveness"] == "stale"
    assert gauges(a)["lanes"] == {"held": 3, "stale_holder": 1, "blocked": 1}
    (warning,) = signals(health(fleet), "stale_holder", "dead_holder")
    assert (warning["signal"], warning["lane"], warning["agent_id"]) == ("stale_holder", "ops", "w-ops")
    dead = wait_until(lambda: (r := lanes(fleet)["ops"])["lane_state"] == "dead_holder" and r,
                      5 * HEARTBEAT_TTL + 10)
    assert dead["holder"]["liveness"] == "dead"
    (warning,) = signals(health(fleet), "stale_holder", "dead_holder")
    assert (warning["signal"], warning["lane"], warning["age_seconds"] > 4 * HEARTBEAT_TTL) == \
        ("dead_holder", "ops", True)
    board = overview(fleet)
    assert (board["ops"]["lane_state"], board["ops"]["liveness"]) == ("dead_holder", "dead")
    text = text_lanes(fleet)
    assert text["ops"].endswith("state dead_holder holder w-ops dead"), text
    assert text["ui"].endswith("state blocked") and "holder" not in text["ui"], text
    assert states(board) == {**states(lanes(fleet))}
    told = gauges(a)
    assert (told["lanes"], told["open_requests"]) == ({"held": 3, "dead_holder": 1, "blocked": 1}, 1)
    # the others went on working, never shown in trouble
    assert {n: s for n, (s, _) in states(board).items() if n != "ops"} == {
        "api": "held", "ui": "blocked", "docs": "held", "db": "held"}

    # ---- moment 3: after the last closeout ------------------------------------------------
    fleet.ctl(a, "heartbeat", "--agent-id", "a1", "--repo", REPO, "--target", "1", "--batch-id", BATCH,
              "--phase", "review")
    fleet.close(a, "a1", "1")
    assert fleet.ctl(a, "claim", "--next", "--batch-id", BATCH, "--agent-id", "a1")["lane"] == "ui"
    fleet.close(a, "a1", "2")
    fleet.close(b, "w-docs", "3")
    fleet.close(b, "a5", "5")
    # w-ops comes back (a new incarnation takes its own dead lane over) and closes it
    assert fleet.ctl(a, "claim", "--next", "--batch-id", BATCH, "--agent-id", "w-ops")["lane"] == "ops"
    fleet.close(a, "w-ops", "4")
    fleet.ctl(a, "answer", "--batch-id", BATCH, "--to-event", still_open, "--message", "the btree one",
              "--agent-id", "lead")
    rows = lanes(fleet)
    assert {name: (row["lane_state"], row.get("closed_as")) for name, row in rows.items()} == \
        dict.fromkeys(MANIFEST_NAMES, ("closed", "done"))
    assert not any("holder" in row for row in rows.values())
    assert all(line.endswith("state closed done") for line in text_lanes(fleet).values())
    report = health(fleet)
    assert signals(report, "stale_holder", "dead_holder", "lane_without_heartbeat",
                   "claim_without_heartbeat") == []
    board = overview(fleet)
    assert all(row["lane_state"] == "closed" and "liveness" not in row and row["status"] == "done"
               for row in board.values()), board
    assert gauges(a) == {"lanes": {"closed": len(MANIFEST_NAMES)}, "machine": "m-a", "open_requests": 0,
                         "open_request_oldest_age_seconds": 0}
    lanes_from_b = fleet.ctl(b, "status")  # a full status on b: b now shows the batch as a does
    assert [x["batch_id"] for x in lanes_from_b["batches"]] == [BATCH]
    assert gauges(b)["lanes"] == {"closed": len(MANIFEST_NAMES)}

    # the follower saw the day, every lifecycle event of a lane naming it, nothing falsely late
    def followed_events() -> list[dict[str, Any]]:
        return [json.loads(line) for line in followed.read_text().splitlines() if line.strip()]

    seen = wait_until(lambda: (e := followed_events()) and
                      sum(x["type"] == "lane_closed" for x in e) == len(MANIFEST_NAMES) and e, 30)
    kinds = [e["type"] for e in seen]
    assert {"help_requested", "help_answered", "claim.acquired", "phase.changed"} <= set(kinds)
    assert all(e.get("lane") for e in seen if e["type"] in ("phase.changed", "lane_closed",
                                                            "lane.keepalive_ended", "claim.released"))
    assert not any(e.get("late") for e in seen), [e for e in seen if e.get("late")]


MANIFEST_NAMES = [lane["name"] for lane in MANIFEST["lanes"]]
