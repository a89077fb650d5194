"""Takeovers on the record, and only on a clock the backend agrees with (issue 40,
findings 4 and 5, and "every takeover says so").

Finding 4, as reproduced on main: a second daemon under `faketime` (+300 s, 60 s
heartbeat TTL) took over 4 live holders.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from typing import Any

import httpx
import pytest

from leases.support import Backend, Machine, wait_until

SKEWED = ("faketime", "-f", "+300s")


@pytest.fixture
def agent_process() -> Any:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _register(m: Machine, batch: str, repo: str, owner: str) -> None:
    manifest = m.daemon.base / f"{batch}.json"
    manifest.write_text(json.dumps({"batch_id": batch, "repo": repo, "lanes": [
        {"name": "lane-a", "owner": owner, "targets": ["5"]}]}))
    assert m.ctl("register-batch", "--file", str(manifest)).returncode == 0


def test_a_forced_takeover_needs_a_reason_is_recorded_and_fences_the_old_lane(
        backend: Backend, machines: Any, repo: str, agent: Any, agent_process: Any) -> None:
    m1, m2 = machines("m1"), machines("m2")
    x, op, batch = agent("x"), agent("op"), f"b-{agent('b')}"
    _register(m1, batch, repo, x)
    m1.json("claim", "--agent-id", x, "--repo", repo, "--target", "5", "--batch-id", batch,
            "--keep-alive", "--watch-pid", str(agent_process.pid), "--heartbeat-ttl", "3",
            "--renew-every", "0.3")
    base = ("takeover", "--agent-id", op, "--repo", repo, "--target", "5")
    for argv, words in ((base + ("--reason", "stuck"), "pass --force"),
                        (base + ("--force",), "missing required --reason"),
                        (base + ("--force", "--reason", "  "), "--reason must say why")):
        refused = m2.ctl(*argv)
        assert refused.returncode == 1 and words in refused.stderr.decode(), refused.stderr
    assert backend.read(f"claims/{repo}/5.json")["agent_id"] == x
    taken = m2.ctl(*base, "--force", "--reason", "x loops on the same test for an hour")
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.decode().startswith(f"took over {repo}#5 from {x} for {op} until ")
    claim = backend.read(f"claims/{repo}/5.json")
    assert (claim["agent_id"], claim["previous_holder"], claim["takeover_reason"],
            claim["takeover_note"]) == (op, x, "forced", "x loops on the same test for an hour")
    events = backend.events(batch)
    acquired = [e for e in events if e["type"] == "claim.acquired" and e["agent_id"] == op]
    assert [(e["previous_holder"], e["takeover_reason"]) for e in acquired] == [(x, "forced")]
    intervention = [e for e in events if e["type"] == "human_intervention"]
    assert [(e["kind"], e["previous_holder"], e["agent_id"], e["message"]) for e in intervention] == [
        ("takeover", x, op, "x loops on the same test for an hour")]
    # the displaced holder's lane stops renewing; its process exiting releases nothing
    wait_until(lambda: next(r for r in m1.json("lanes")["lanes"] if r["agent_id"] == x)["state"]
               == "fenced", 5.0)
    agent_process.kill()
    agent_process.wait()
    time.sleep(1.0)
    assert backend.read(f"claims/{repo}/5.json")["status"] == "active"
    refused = m1.ctl("release", "--agent-id", x, "--repo", repo, "--target", "5")
    assert refused.returncode == 1 and f"claim belongs to {op}" in refused.stderr.decode()


@pytest.fixture
def faketime() -> None:
    if shutil.which("faketime") is None:
        import os

        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and faketime is missing (Debian's faketime package)")
        pytest.skip("faketime not installed: apt-get install faketime")


@pytest.mark.usefixtures("faketime")
@pytest.mark.parametrize("backend", ["http", "etcd"], indirect=True)  # a local root: one clock
def test_a_machine_whose_clock_is_off_refuses_takeovers_with_unknown(
        backend: Backend, machines: Any, repo: str, agent: Any) -> None:
    honest = machines("m1")
    skewed = machines("m2", wrapper=SKEWED, FAKETIME_DONT_FAKE_MONOTONIC="1",
                      AGENT_COORD_METRICS_PORT=str(_free_port()))
    holders = [agent(f"h{i}") for i in range(4)]
    for i, holder in enumerate(holders):  # four live holders, 60 s heartbeats
        honest.json("claim", "--agent-id", holder, "--repo", repo, "--target", str(i))
        honest.json("heartbeat", "--agent-id", holder, "--repo", repo, "--target", str(i),
                    "--ttl", "60")
    for i, holder in enumerate(holders):
        refused = skewed.ctl("claim", "--agent-id", agent("y"), "--repo", repo, "--target", str(i))
        assert refused.returncode == 2, refused.stderr  # UNKNOWN, never a takeover
        assert re.search(r"this machine's clock is (29\d|30\d)\.\ds ahead of the backend's "
                         r"\(bound 5s\)", refused.stderr.decode()), refused.stderr
        assert backend.read(f"claims/{repo}/{i}.json")["agent_id"] == holder
    doctor = skewed.ctl("doctor", "--json")
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 2 and report["clock"]["status"] == "beyond_bound", report
    assert 295 < report["clock"]["offset_seconds"] < 305
    health = skewed.ctl("health", "--json")
    signals = [w["signal"] for w in json.loads(health.stdout)["warnings"]]
    assert "clock_offset" in signals
    metrics = httpx.get(f"http://127.0.0.1:{skewed.daemon.extra_env['AGENT_COORD_METRICS_PORT']}"
                        "/metrics", timeout=10,
                        headers={"Authorization": f"Bearer {skewed.daemon.dashboard_token()}"}).text
    offset = [line for line in metrics.splitlines()
              if line.startswith("agentcoord_backend_clock_offset_seconds{")]
    assert offset and 295 < float(offset[0].rsplit(" ", 1)[1]) < 305, offset
    # the honest machine's clock agrees with the backend's: its doctor says so
    fine = json.loads(honest.ctl("doctor", "--deep", "--json").stdout)["clock"]
    assert fine["status"] == "ok" and abs(fine["offset_seconds"]) < 2.0, fine


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
