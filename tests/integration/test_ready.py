"""ready, claim --next and wait --until-ready through ctl and a real daemon (local root)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.model import ids

from .helpers import PYTHON, Daemon
from .ready_race import (
    Caller, check_pool_race, pool_manifest, race, refusal_line, register, run_pair_race,
)

REPO = "acme/widgets"
BATCH = {"batch_id": "b1", "repo": REPO, "lanes": [
    {"name": "api", "owner": "pool", "pool": True, "targets": ["1"]},
    {"name": "ui", "owner": "pool", "pool": True, "targets": ["2"], "depends_on": "b1:api"},
    {"name": "docs", "owner": "w-docs", "targets": ["3"], "priority": 0},
    {"name": "ops", "owner": "w-ops", "targets": ["4", "5"], "priority": 1},
]}


def _register(daemon: Daemon, manifest: dict[str, Any] = BATCH) -> None:
    path = daemon.base / "batch.json"
    path.write_text(json.dumps(manifest))
    done = daemon.ctl("register-batch", "--file", str(path))
    assert done.returncode == 0, done.stderr


def _one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_ready_lists_lanes_in_priority_then_manifest_order_with_reasons(daemon: Daemon) -> None:
    _register(daemon)
    text = daemon.ctl("ready", "--batch-id", "b1", "--agent-id", "w-docs")
    assert text.returncode == 0, text.stderr
    assert text.stdout.decode().splitlines() == [
        "batch b1: 3 ready, 1 blocked, 0 held, 0 closed; 2 for w-docs",
        "  ready   docs owner w-docs targets 3 priority 0 - may take",
        "  ready   ops owner w-ops targets 4,5 priority 1",
        "  ready   api owner pool (pool) targets 1 - may take",
        "  blocked ui owner pool (pool) targets 2 - blocked_on b1:api",
    ]
    payload = json.loads(daemon.ctl("ready", "--batch-id", "b1", "--json").stdout)
    assert payload["ready"] == ["docs", "ops", "api"]
    assert [(row["name"], row["state"]) for row in payload["lanes"]] == \
        [("docs", "ready"), ("ops", "ready"), ("api", "ready"), ("ui", "blocked")]
    assert payload["lanes"][3]["blocked_on"] == ["b1:api"]


def test_claim_next_claims_prints_and_attributes_the_lane(daemon: Daemon) -> None:
    _register(daemon)
    first = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-docs")
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().startswith("claimed lane docs of batch b1: acme/widgets#3 by w-docs until ")
    pool = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-any", "--json")
    payload = json.loads(pool.stdout)
    assert (payload["lane"], payload["repo"], payload["target"]) == ("api", REPO, "1")
    assert payload["claim"]["agent_id"] == "w-any" and payload["claim"]["batch_id"] == "b1"
    events = [json.loads(p.read_text()) for p in (daemon.root / "events" / "b1").glob("*.json")]
    assert sorted(e["lane"] for e in events if e["type"] == "claim.acquired") == ["api", "docs"]
    closed = daemon.ctl("release", "--agent-id", "w-any", "--repo", REPO, "--target", "1",
                        "--terminal", "done", "--host", "m1")
    assert closed.returncode == 0, closed.stderr
    audit = json.loads(daemon.ctl("batch-audit", "--batch-id", "b1", "--json").stdout)
    lanes = {lane["name"]: lane for lane in audit["lanes"]}
    assert lanes["api"]["complete"] is True  # the pool lane, closed by the agent that took it
    assert lanes["docs"]["missing"] == ["terminal"]
    again = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-docs", "--json")
    retried = json.loads(again.stdout)  # a retry gets the lane it holds back, never a second one
    assert (retried["lane"], retried["action"], retried["already_held"]) == ("docs", "renewed", True)
    assert "w-docs already holds lane docs of b1" in again.stderr.decode()
    assert daemon.ctl("release", "--agent-id", "w-docs", "--repo", REPO, "--target", "3",
                      "--terminal", "done", "--host", "m1").returncode == 0
    after = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-docs", "--json")
    assert json.loads(after.stdout)["lane"] == "ui"  # api and docs done
    refused = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-late")
    assert (refused.returncode, refused.stdout) == (3, b"")
    assert _one_line(refused) == refusal_line("b1", 0, 1, 1).strip()


def test_claim_next_keep_alive_registers_the_lane_and_its_heartbeat(daemon: Daemon) -> None:
    _register(daemon)
    taken = daemon.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "w-ka", "--keep-alive",
                       "--heartbeat-ttl", "120", "--json")
    assert taken.returncode == 0, taken.stderr
    payload = json.loads(taken.stdout)
    assert payload["lane"] == "api" and payload["keep_alive"]["agent_id"] == "w-ka"
    beat = json.loads((daemon.root / "heartbeats" / "w-ka.json").read_text())
    assert (beat["repo"], beat["target"], beat["batch_id"]) == (REPO, "1", "b1")
    lanes = json.loads(daemon.ctl("lanes", "--json").stdout)
    assert [(row["agent_id"], row["target"]) for row in lanes["lanes"]] == [("w-ka", "1")]
    held = json.loads(daemon.ctl("ready", "--batch-id", "b1", "--json").stdout)
    api = next(row for row in held["lanes"] if row["name"] == "api")
    assert api["held_by"] == [{"target": "1", "agent_id": "w-ka", "liveness": "live"}]


@pytest.mark.parametrize(("argv", "code", "words"), [
    (("ready", "--batch-id", "../x"), 1, "batch"),
    (("ready",), 1, "missing required --batch-id"),
    (("ready", "--batch-id", "nope"), 2, "batch nope not found"),
    (("ready", "--batch-id", "b1", "--agent-id", "a/b"), 1, "agent"),
    (("claim", "--next", "--agent-id", "w1"), 1, "missing required --batch-id"),
    (("claim", "--next", "--batch-id", "b1"), 1, "missing required --agent-id"),
    (("claim", "--next", "--batch-id", "b1", "--agent-id", "w1", "--target", "1"), 1, "drop --repo/--target"),
    (("claim", "--next", "--batch-id", "nope", "--agent-id", "w1"), 2, "batch nope not found"),
    (("claim", "--next", "--batch-id", "b" * 5000, "--agent-id", "w1"), 1, "batch"),
    (("claim", "--agent-id", "w1", "--repo", REPO), 1, "missing required --target"),
    (("wait", "--until-ready", "--timeout", "1"), 1, "--until-ready needs --batch-id"),
    (("wait", "--until-unblocked", "--batch-id", "b1", "--lane", "ui", "--agent-id", "w1"), 1,
     "--agent-id is only valid with --until-ready"),
])
def test_hostile_or_wrong_calls_are_one_line_with_the_documented_code(
        daemon: Daemon, argv: tuple[str, ...], code: int, words: str) -> None:
    _register(daemon)
    result = daemon.ctl(*argv)
    assert result.returncode == code, result.stderr
    assert words in _one_line(result)


@pytest.mark.parametrize("lane_extra", [
    {"pool": "yes"}, {"pool": None, "priority": -3}, {"priority": "P0"}, {"priority": 2.5},
    {"priority": [1]}, {"priority": 10**30},
])
def test_a_manifest_with_weird_pool_or_priority_is_refused_in_one_line(
        daemon: Daemon, lane_extra: dict[str, Any]) -> None:
    path = daemon.base / "weird.json"
    path.write_text(json.dumps({"batch_id": "bw", "repo": REPO, "lanes": [
        {"name": "l", "owner": "pool", "targets": ["1"], **lane_extra}]}))
    result = daemon.ctl("register-batch", "--file", str(path))
    assert result.returncode == 1
    assert "lanes[0]" in _one_line(result)
    assert not (daemon.root / "batches" / "bw.json").exists()


def test_wait_until_ready_returns_when_a_dependency_closes(daemon: Daemon) -> None:
    _register(daemon, {"batch_id": "b1", "repo": REPO, "lanes": [
        {"name": "api", "owner": "w-api", "targets": ["1"]},
        {"name": "ui", "owner": "pool", "pool": True, "targets": ["2"], "depends_on": "b1:api"}]})
    timed_out = daemon.ctl("wait", "--until-ready", "--batch-id", "b1", "--agent-id", "w-ui",
                           "--timeout", "0.5", "--json")
    assert timed_out.returncode == 2
    assert json.loads(timed_out.stdout)["detail"] == "no lane of b1 ready for w-ui (1 blocked, 0 held, 0 closed)"
    waiter = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "wait", "--until-ready", "--batch-id", "b1",
         "--agent-id", "w-ui", "--timeout", "30", "--interval", "0.1", "--json"],
        env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        assert waiter.poll() is None
        assert daemon.ctl("claim", "--agent-id", "w-api", "--repo", REPO, "--target", "1",
                          "--batch-id", "b1").returncode == 0
        closed = daemon.ctl("release", "--agent-id", "w-api", "--repo", REPO, "--target", "1",
                            "--terminal", "done", "--host", "m1")
        assert closed.returncode == 0, closed.stderr
        done_at = time.monotonic()
        out, err = waiter.communicate(timeout=10)
        assert time.monotonic() - done_at < 2.0
    finally:
        waiter.kill()
        waiter.communicate()
    assert waiter.returncode == 0, err
    answer = json.loads(out)
    assert answer["met"] is True and answer["ready"]["lane"] == "ui"
    assert b"waiting: no lane of b1 ready for w-ui" in err
    text = daemon.ctl("wait", "--until-ready", "--batch-id", "b1", "--timeout", "5")
    assert text.stdout == b"ready: lane ui of b1 is ready\n"


def _local_callers(daemon: Daemon, second: Daemon) -> list[Caller]:
    """Two daemons (two "machines") on one local root."""
    argv = [PYTHON, "-m", "agentcoordctl.cli"]
    return [(argv, daemon.env()),
            (argv, second.env(AGENT_COORD_STATE_ROOT=str(daemon.root)))]


def _reader(root: Path) -> Any:
    def read(path: str) -> dict[str, Any] | None:
        file = root / path
        return json.loads(file.read_text()) if file.exists() else None
    return read


def test_race_32_agents_claim_next_on_32_pool_lanes_local(daemon: Daemon, daemon_factory: Any) -> None:
    second = daemon_factory("d2")
    second.start()
    callers = _local_callers(daemon, second)
    manifest = pool_manifest("race", REPO, 32)
    register(callers[0], manifest, daemon.base)
    results = race(callers, "race", [f"agent-{i}" for i in range(32)])
    check_pool_race(results, manifest, _reader(daemon.root))
    events = [json.loads(p.read_text()) for p in (daemon.root / "events" / "race").glob("*.json")]
    acquired = [e for e in events if e["type"] == "claim.acquired"]
    assert sorted(e["lane"] for e in acquired) == sorted(f"l{i}" for i in range(32))


def test_race_with_dependencies_never_hands_out_a_blocked_lane_local(
        daemon: Daemon, daemon_factory: Any) -> None:
    second = daemon_factory("d2")
    second.start()
    callers = _local_callers(daemon, second)
    manifest = pool_manifest("pairs", REPO, 32, pairs=True)
    register(callers[0], manifest, daemon.base)
    run_pair_race(callers, manifest, _reader(daemon.root), agents=32)


def _documented_pool_manifest() -> dict[str, Any]:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## Pool lanes and priority", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def test_the_documented_pool_manifest_and_readme_loop_work_as_written(daemon: Daemon) -> None:
    _register(daemon, _documented_pool_manifest())
    view = json.loads(daemon.ctl("ready", "--batch-id", "wave-10", "--agent-id", "w7", "--json").stdout)
    assert [row["name"] for row in view["lanes"]] == ["schema", "fixture-b", "fixture-a", "docs"]
    assert view["lanes"][3]["blocked_on"] == ["wave-10:fixture-a", "wave-10:fixture-b"]
    assert view["takeable"] == ["fixture-b", "fixture-a"]
    for agent, lane in (("w7", "fixture-b"), ("w7", "fixture-b"), ("w9", "fixture-a")):
        taken = daemon.ctl("claim", "--next", "--batch-id", "wave-10", "--agent-id", agent,
                           "--keep-alive")
        assert taken.returncode == 0 and f"claimed lane {lane} " in taken.stdout.decode()
    nothing = daemon.ctl("claim", "--next", "--batch-id", "wave-10", "--agent-id", "w8", "--keep-alive")
    assert nothing.returncode == 3
    assert _one_line(nothing) == refusal_line("wave-10", 1, 2, 0).strip()
    for agent, target in (("w7", "403"), ("w9", "402")):
        assert daemon.ctl("release", "--agent-id", agent, "--repo", REPO, "--target", target,
                          "--terminal", "done", "--host", "m1").returncode == 0
    waited = daemon.ctl("wait", "--until-ready", "--batch-id", "wave-10", "--agent-id", "w8",
                        "--timeout", "600")
    assert waited.returncode == 0 and waited.stdout == b"ready: lane docs of wave-10 is ready for w8\n"
