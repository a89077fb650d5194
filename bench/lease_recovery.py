"""How soon a dead agent's claim is free, and that a stopped one's never is (issue 40).

    .venv/bin/python bench/lease_recovery.py [--backends local,http,etcd] [--trials 100]
                                             [--ttl 10] [--stop-lanes 20] [--skip-stop]

For each backend (a temporary local root; our Worker under `wrangler dev --local`,
tests/worker_fixture.py; a one-member etcd, tests/store/etcd_cluster.py) one real
agentcoordd, configured for it as a service would be, and:

* **kill**: `--trials` times, an agent holds a keep-alive claim (`--heartbeat-ttl
  TTL`, watching a stand-in agent process) and that process is SIGKILLed; another
  agent retries `claim` every 100 ms. Printed: seconds from the kill to the other
  agent's exit 0, p50 / p99 / max (and how many trials never got it within
  5 x TTL + 10 s).
* **stop**: `--stop-lanes` agents hold keep-alive claims (TTL 3 s) and their
  processes are SIGSTOPped for 3 x TTL + 1 s while other agents retry `claim` on
  every target every 100 ms; then SIGCONT. Printed: takeovers and releases seen
  (both must be 0) and the false-death rate.

Requests go through ctl's client library (`agentcoordctl.client.request`), so a
retry costs a round trip, not an interpreter start-up. Run it in an older tree
to get the "before" figures (the kill there waits for the heartbeat to die:
4 x TTL; use --trials 5).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "store"))

from agentcoordctl import client  # noqa: E402
from agentcoordd import protocol as p  # noqa: E402

RETRY = 0.1
STOP_TTL = 3
FAMILIES = ["claims", "heartbeats", "batches", "events"]


@contextlib.contextmanager
def backend(kind: str, base: Path) -> Iterator[dict[str, str]]:
    """The environment an agent (and the daemon) needs for the backend."""
    if kind == "local":
        root = base / "root"
        root.mkdir()
        yield {"AGENT_COORD_STATE_ROOT": str(root)}
    elif kind == "http":
        from worker_fixture import launch_worker

        (base / "worker").mkdir()
        with launch_worker(base / "worker", {"m": (FAMILIES, FAMILIES)}) as worker:
            yield {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["m"]}
    else:
        from etcd_cluster import running_cluster

        with running_cluster(base / "etcd") as cluster:
            yield {"AGENT_COORD_ETCD_ENDPOINTS": ",".join(cluster.endpoints)}


class Daemon:
    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.socket = str(base / "d.sock")
        self.env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base / "home"),
                    "XDG_STATE_HOME": str(base / "xdg"), **env}
        self.caller = {**self.env, "AGENT_COORD_SOCKET": self.socket, "AGENT_COORD_NO_AUTOSTART": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentcoordd.daemon.main", "--foreground", "--socket",
             self.socket, "--state-dir", str(base / "state"), "--log-level", "warning"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(base / "daemon.log", "ab"))  # noqa: SIM115 - the daemon's for its life
        deadline = time.monotonic() + 15
        while not client.daemon_running(self.socket, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start; see {base / 'daemon.log'}")
            time.sleep(0.02)

    def call(self, message: Any) -> p.Response:
        message.caller = p.Caller(env=self.caller, cwd="/", pid=os.getpid())
        response, _ = client.request(message, timeout=30.0, autostart=False, path=self.socket)
        return response

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def hold(d: Daemon, agent: str, repo: str, target: str, ttl: int) -> subprocess.Popen:
    """A stand-in agent process holding a keep-alive claim on repo#target."""
    proc = subprocess.Popen(["sleep", "3600"])
    response = d.call(p.Claim(agent_id=agent, repo=repo, target=target, keep_alive=p.KeepAlive(
        watch_pid=proc.pid, heartbeat_ttl=ttl)))
    if response.exit_code != 0:
        proc.kill()
        raise RuntimeError(f"holder claim failed: {response.error}")
    return proc


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def kill_trials(d: Daemon, trials: int, ttl: int) -> dict[str, Any]:
    repo = f"bench{uuid.uuid4().hex[:8]}/r"
    waits: list[float] = []
    missed = 0
    for trial in range(trials):
        target = str(trial)
        proc = hold(d, f"holder-{trial}", repo, target, ttl)
        proc.kill()
        killed = time.monotonic()
        proc.wait()
        deadline = killed + 5 * ttl + 10
        while True:
            started = time.monotonic()
            response = d.call(p.Claim(agent_id=f"next-{trial}", repo=repo, target=target))
            if response.exit_code == 0:
                waits.append(time.monotonic() - killed)
                break
            if started > deadline:
                missed += 1
                break
            time.sleep(max(0.0, RETRY - (time.monotonic() - started)))
    return {"trials": trials, "p50": percentile(waits, 0.5) if waits else None,
            "p99": percentile(waits, 0.99) if waits else None,
            "max": max(waits) if waits else None, "missed": missed}


def stop_trial(d: Daemon, lanes: int) -> dict[str, Any]:
    repo = f"bench{uuid.uuid4().hex[:8]}/r"
    holders = [hold(d, f"stopped-{i}", repo, str(i), STOP_TTL) for i in range(lanes)]
    takeovers = attempts = 0
    try:
        for proc in holders:
            os.kill(proc.pid, signal.SIGSTOP)
        until = time.monotonic() + 3 * STOP_TTL + 1
        while time.monotonic() < until:
            started = time.monotonic()
            for i in range(lanes):
                response = d.call(p.Claim(agent_id=f"rival-{i}", repo=repo, target=str(i)))
                attempts += 1
                takeovers += response.exit_code == 0
            time.sleep(max(0.0, RETRY - (time.monotonic() - started)))
    finally:
        for proc in holders:
            os.kill(proc.pid, signal.SIGCONT)
    released = 0
    for i in range(lanes):
        status = d.call(p.Status(repo=repo, target=str(i)))
        claim = ((status.payload or {}).get("claims") or [{}])[0]
        released += claim.get("status") != "active" or claim.get("agent_id") != f"stopped-{i}"
    for proc in holders:
        proc.kill()
        proc.wait()
    return {"lanes": lanes, "stopped_for": 3 * STOP_TTL + 1, "attempts": attempts,
            "takeovers": takeovers, "released_or_lost": released,
            "false_death_rate": (takeovers + released) / lanes}


def run(kind: str, args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix=f"leasebench-{kind}.", dir="/tmp"))
    try:
        with backend(kind, base) as env:
            d = Daemon(base, env)
            try:
                kill = kill_trials(d, args.trials, args.ttl)
                print(f"{kind:5} kill: {kill['trials']} trials (heartbeat TTL {args.ttl}s): "
                      f"claimable after p50 {_s(kill['p50'])} p99 {_s(kill['p99'])} "
                      f"max {_s(kill['max'])}; never within 5 x TTL + 10 s: {kill['missed']}",
                      flush=True)
                if not args.skip_stop:
                    stop = stop_trial(d, args.stop_lanes)
                    print(f"{kind:5} stop: {stop['lanes']} holders SIGSTOPped {stop['stopped_for']}s "
                          f"(TTL {STOP_TTL}s), {stop['attempts']} rival claims: takeovers "
                          f"{stop['takeovers']}, released {stop['released_or_lost']}, false-death "
                          f"rate {stop['false_death_rate']:.3f}", flush=True)
            finally:
                d.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,http,etcd")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--ttl", type=int, default=10, help="heartbeat TTL of the killed holders")
    parser.add_argument("--stop-lanes", type=int, default=20)
    parser.add_argument("--skip-stop", action="store_true")
    args = parser.parse_args()
    for kind in args.backends.split(","):
        run(kind.strip(), args)


if __name__ == "__main__":
    main()
