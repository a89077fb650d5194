"""A claim is free seconds after its holder dies, and never before (issue 40, finding 2).

On main a keep-alive lane whose watched process was SIGKILLed stopped renewing
within a second, but its claim stayed held until the heartbeat died: 39-41 s
with a 10 s TTL, an hour at the default 900 s. Now the daemon releases it on the
agent's behalf; a stopped (SIGSTOPped) or simply quiet agent is alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_cluster import running_cluster
from worker_fixture import launch_worker

from leases.support import FAMILIES, Backend, Machine, wait_until


@pytest.fixture
def agent_process() -> Iterator[subprocess.Popen]:
    """A stand-in agent host (any process the daemon can watch)."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _register(m: Machine, batch: str, repo: str, owner: str, target: str = "5") -> None:
    manifest = m.daemon.base / f"{batch}.json"
    manifest.write_text(json.dumps({"batch_id": batch, "repo": repo, "lanes": [
        {"name": "lane-a", "owner": owner, "targets": [target]}]}))
    assert m.ctl("register-batch", "--file", str(manifest)).returncode == 0


def _keep_alive_claim(m: Machine, agent: str, repo: str, pid: int, *extra: str) -> dict[str, Any]:
    return m.json("claim", "--agent-id", agent, "--repo", repo, "--target", "5", "--keep-alive",
                  "--watch-pid", str(pid), "--heartbeat-ttl", "30", *extra)


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_killed_holders_claim_is_released_for_the_next_agent_in_seconds(
        backend: Backend, machines: Any, repo: str, agent: Any, agent_process: subprocess.Popen) -> None:
    m1, m2 = machines("m1"), machines("m2")
    x, y, batch = agent("x"), agent("y"), f"b-{agent('b')}"
    _register(m1, batch, repo, x)
    _keep_alive_claim(m1, x, repo, agent_process.pid, "--batch-id", batch, "--branch", "feat/5",
                      "--phase", "implement")
    assert m2.ctl("claim", "--agent-id", y, "--repo", repo, "--target", "5").returncode == 3
    _kill(agent_process)
    started = time.monotonic()
    wait_until(lambda: m2.ctl("claim", "--agent-id", y, "--repo", repo, "--target", "5",
                              "--batch-id", batch).returncode == 0, 10.0, interval=0.1)
    assert time.monotonic() - started < 5.0
    released = [e for e in backend.events(batch) if e["type"] == "claim.released"]
    assert len(released) == 1
    event = released[0]
    assert (event["agent_id"], event["lane"], event["release_mode"]) == (x, "lane-a", "holder_exited")
    assert event["branch"] == "feat/5" and event["phase"] == "implement"  # kept for the next claimant
    assert "watched process" in event["message"]
    taken = [e for e in backend.events(batch) if e["type"] == "claim.acquired" and e["agent_id"] == y]
    assert len(taken) == 1 and "previous_holder" not in taken[0]  # a released claim: no takeover
    lane = next(r for r in m1.json("lanes")["lanes"] if r["agent_id"] == x)
    assert (lane["state"], lane["end_reason"], lane["claim"]) == (
        "ended", "watched_process_exited", "released")


def test_on_exit_keep_leaves_the_claim_to_its_heartbeat(
        backend: Backend, machines: Any, repo: str, agent: Any, agent_process: subprocess.Popen) -> None:
    m1 = machines("m1")
    x = agent("x")
    _keep_alive_claim(m1, x, repo, agent_process.pid, "--on-exit", "keep")
    _kill(agent_process)
    wait_until(lambda: next(r for r in m1.json("lanes")["lanes"] if r["agent_id"] == x)["state"] == "ended", 5.0)
    time.sleep(1.0)  # a release would have happened by now
    assert backend.read(f"claims/{repo}/5.json")["status"] == "active"
    refused = m1.ctl("claim", "--agent-id", agent("y"), "--repo", repo, "--target", "5")
    assert refused.returncode == 3 and "heartbeat live" in refused.stderr.decode()


def test_a_restarted_daemon_releases_the_claim_of_a_process_that_died_meanwhile(
        backend: Backend, machines: Any, repo: str, agent: Any, agent_process: subprocess.Popen) -> None:
    m1 = machines("m1")
    x = agent("x")
    _keep_alive_claim(m1, x, repo, agent_process.pid)
    assert m1.daemon.stop() == 0
    _kill(agent_process)
    m1.daemon.start()
    claim = wait_until(lambda: (c := backend.read(f"claims/{repo}/5.json"))["status"] == "released" and c, 10.0)
    assert claim["release_mode"] == "holder_exited"


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # the others: bench/lease_recovery.py
def test_a_lane_whose_process_lives_never_releases_and_has_no_idle_timeout(
        machines: Any, backend: Backend, repo: str, agent: Any, agent_process: subprocess.Popen) -> None:
    m1 = machines("m1")
    x = agent("x")
    claimed = m1.json("claim", "--agent-id", x, "--repo", repo, "--target", "5", "--keep-alive",
                      "--watch-pid", str(agent_process.pid), "--heartbeat-ttl", "2")
    assert claimed["keep_alive"]["idle_timeout"] > 10 * 365 * 86400  # a long tool call is fine
    os.kill(agent_process.pid, signal.SIGSTOP)  # a stopped agent is alive
    try:
        deadline = time.monotonic() + 6.5  # more than 3 x its heartbeat TTL
        while time.monotonic() < deadline:
            refused = m1.ctl("claim", "--agent-id", agent("y"), "--repo", repo, "--target", "5")
            assert refused.returncode == 3, refused.stderr
            time.sleep(0.5)
    finally:
        os.kill(agent_process.pid, signal.SIGCONT)
    assert backend.read(f"claims/{repo}/5.json")["status"] == "active"
    lane = next(r for r in m1.json("lanes")["lanes"] if r["agent_id"] == x)
    assert lane["state"] == "active" and lane["failures"] == 0


@pytest.mark.parametrize("kind", ["http", "etcd"])
def test_a_release_the_backend_did_not_take_is_retried_and_survives_a_daemon_kill(
        kind: str, request: pytest.FixtureRequest, short_dir: Path, repo: str, agent: Any,
        agent_process: subprocess.Popen) -> None:
    """The holder dies while the backend is down; the daemon is SIGKILLed while the release
    is pending; backend and daemon come back: the claim is released, nothing was lost."""
    from integration.helpers import make_daemon

    with _own_backend(kind, request, short_dir) as (backend, down, up):
        base = short_dir / "m1"
        base.mkdir()
        daemon = make_daemon(base)
        daemon.extra_env.update(backend.env)  # the machine's configured backend (its env file)
        daemon.start()
        m1 = Machine(daemon, backend)
        try:
            x = agent("x")
            _keep_alive_claim(m1, x, repo, agent_process.pid)
            down()
            _kill(agent_process)
            wait_until(lambda: next(r for r in m1.json("lanes")["lanes"]
                                    if r["agent_id"] == x).get("claim") == "releasing", 10.0)
            # saved (within the saver's next round) with the release still to do
            wait_until(lambda: [(s["agent_id"], s.get("release_pending")) for s in json.loads(
                (daemon.state_dir / "lanes.json").read_text())["lanes"]] == [(x, True)], 5.0)
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(10)
            up()
            daemon.start()
            claim = wait_until(lambda: (c := backend.read(f"claims/{repo}/5.json"))["status"]
                               == "released" and c, 20.0, interval=0.2)
            assert claim["release_mode"] == "holder_exited"
            wait_until(lambda: json.loads((daemon.state_dir / "lanes.json").read_text())["lanes"] == [], 5.0)
        finally:
            daemon.stop()


class _own_backend:
    """A backend of the test's own, which it can take down and bring back."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, base: Path) -> None:
        self.kind, self.request, self.base = kind, request, base

    def __enter__(self) -> tuple[Backend, Any, Any]:
        if self.kind == "http":
            (self.base / "worker").mkdir()
            self._context = launch_worker(self.base / "worker", {"m": (FAMILIES, FAMILIES), "ops": None})
            worker = self._context.__enter__()
            backend = Backend("http", {"AGENT_COORD_API_URL": worker.url,
                                       "AGENT_COORD_API_TOKEN": worker.tokens["m"]},
                              lambda: worker.store("ops"))
            return backend, worker.stop, worker.restart
        self._context = running_cluster(self.base / "etcd")
        cluster = self._context.__enter__()
        backend = Backend("etcd", {"AGENT_COORD_ETCD_ENDPOINTS": ",".join(cluster.endpoints)},
                          lambda: _etcd_store(cluster))

        def up() -> None:
            cluster.restart(0)
            cluster.wait_healthy()
        return backend, lambda: cluster.kill(0), up

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)


def _etcd_store(cluster: Any) -> Any:
    from agentcoordd.store.etcd import EtcdStore

    return EtcdStore(cluster.endpoints, timeout=5.0)
