"""`python -m sim history`: a fleet working a pool of targets under injected faults,
every call recorded, the history checked (sim/history.py; docs/reliability.md).

    python -m sim history [--backend local|http|etcd] [--agents 16] [--ops 10000]
                          [--targets 6] [--faults all|none|kill-daemon,kill-agent,stop-agent,
                          backend,skew] [--seed 1] [--out DIR] [--json]

Two machines (daemons) share the backend; agents (separate processes,
sim/chaos_agent.py) are split between them. While they work, one fault at a time:

* `kill-daemon` — SIGKILL a machine's agentcoordd, restart it a moment later;
* `kill-agent` — SIGKILL an agent process mid-call; it restarts as a new incarnation;
* `stop-agent` — SIGSTOP an agent for longer than 4 x its heartbeat TTL (its claim is
  taken over), then SIGCONT: its fenced writes must now be refused;
* `backend` — the Worker (`wrangler dev`) restarted; an etcd leader SIGKILLed in a
  3-member cluster and restarted; (a local root has no server to fail);
* `skew` — machine m1's daemon runs under `faketime` (+90 s) the whole run: on the
  Worker and etcd its takeovers are refused (exit 2: unknown), on a local root it
  decides on its own clock (docs/backends.md#clocks) — safety must hold either way.

At the end the final state (each target's claim, the batch's events) is read
directly from the backend and the history is checked. Exit 0 when there is no
violation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from sim import history
from sim.cluster import REPO_ROOT, Machine, _tests_on_path

FAULTS = ("kill-daemon", "kill-agent", "stop-agent", "backend", "skew")
HB_TTL = 1
SKEW = "+90s"


class Backend:
    """The backend of a run: the environment machines use, a direct Store, and its fault."""

    def __init__(self, env: dict[str, str], store: Any, fault: Any = None) -> None:
        self.env = env
        self.store = store  # () -> Store
        self.fault = fault  # () -> str | None: inject one backend fault, say which


@contextlib.contextmanager
def backend(kind: str, base: Path) -> Iterator[Backend]:
    if kind == "local":
        from agentcoordd.store.local import LocalStore

        root = base / "root"
        root.mkdir()
        yield Backend({"AGENT_COORD_STATE_ROOT": str(root)}, lambda: LocalStore(root))
        return
    _tests_on_path()
    if kind == "http":
        from worker_fixture import launch_worker  # type: ignore[import-not-found]

        (base / "worker").mkdir()
        with launch_worker(base / "worker", {"fleet": None}) as server:
            def restart() -> str:
                server.restart()
                return "worker restarted"
            yield Backend({"AGENT_COORD_API_URL": server.url,
                           "AGENT_COORD_API_TOKEN": server.tokens["fleet"]},
                          lambda: server.store("fleet"), restart)
        return
    from store.etcd_cluster import running_cluster  # type: ignore[import-not-found]

    from agentcoordd.store.etcd import EtcdStore

    with running_cluster(base / "etcd", members=3) as cluster:
        def kill_leader() -> str:
            leader = cluster.leader_index()
            if leader is None:
                return "no leader to kill"
            cluster.kill(leader)
            time.sleep(1.0)
            cluster.restart(leader)
            return f"etcd leader m{leader} killed and restarted"
        yield Backend({"AGENT_COORD_ETCD_ENDPOINTS": ",".join(cluster.endpoints)},
                      lambda: EtcdStore(cluster.endpoints, timeout=10.0), kill_leader)


class Run:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args = args
        self.out = out
        self.rng = random.Random(args.seed)
        self.faults = set(FAULTS if args.faults == "all" else
                          () if args.faults == "none" else args.faults.split(","))
        self.agents = [f"a{i:02d}" for i in range(args.agents)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.incarnations: dict[str, int] = {}
        self.injected: list[tuple[str, str]] = []  # (fault kind, what happened)
        self.lock = threading.Lock()

    def start_agent(self, name: str, config_path: Path) -> None:
        self.incarnations[name] = self.incarnations.get(name, 0) + 1
        with open(self.out / "agents" / f"{name}.err", "ab") as errors:  # the child keeps its copy
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "sim.chaos_agent", str(config_path), name,
                 str(self.incarnations[name])],
                cwd=str(REPO_ROOT), stdout=subprocess.DEVNULL, stderr=errors)

    def inject(self, machines: list[Machine], store: Backend, config_path: Path,
               stop: threading.Event) -> None:
        """One fault at a time, until the agents are done."""
        kinds = [k for k in ("kill-daemon", "kill-agent", "stop-agent", "backend") if k in self.faults
                 and (k != "backend" or store.fault is not None)]
        while kinds and not stop.wait(self.rng.uniform(0.5, 2.0)):
            kind = self.rng.choice(kinds)
            if kind == "kill-daemon":
                machine = self.rng.choice(machines)
                assert machine.proc is not None
                machine.proc.send_signal(signal.SIGKILL)
                machine.proc.wait()
                time.sleep(self.rng.uniform(0.2, 1.0))
                machine.start()
                self.injected.append((kind, f"daemon {machine.name} SIGKILLed"))
            elif kind == "kill-agent":
                name = self.rng.choice(self.agents)
                with self.lock:
                    proc = self.procs[name]
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGKILL)
                        proc.wait()
                        self.injected.append((kind, f"agent {name} SIGKILLed"))
                        self.start_agent(name, config_path)
            elif kind == "stop-agent":  # a holder: its claim is taken over while it sleeps
                holders = [a for a in _holders(store, self.args.targets) if a in self.procs]
                name = self.rng.choice(holders or self.agents)
                proc = self.procs[name]
                if proc.poll() is None:
                    proc.send_signal(signal.SIGSTOP)
                    stop.wait(4 * HB_TTL + self.rng.uniform(1.0, 2.0))
                    proc.send_signal(signal.SIGCONT)
                    self.injected.append((kind, f"agent {name} SIGSTOPped past its heartbeat's death"))
            else:
                self.injected.append((kind, store.fault()))

    def execute(self) -> dict[str, Any]:
        args = self.args
        (self.out / "history").mkdir(parents=True)
        (self.out / "agents").mkdir()
        base = Path(tempfile.mkdtemp(prefix="achist."))
        try:
            with backend(args.backend, base) as store:
                return self._with_backend(store, base)
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def _with_backend(self, store: Backend, base: Path) -> dict[str, Any]:
        args = self.args
        machines = [Machine(i, base / "machines", store.env, self.out) for i in range(2)]
        if "skew" in self.faults:
            machines[1].wrapper = ["faketime", "-f", SKEW]
            self.injected.append(("skew", f"daemon m1 runs {SKEW} ahead (faketime) the whole run"))
        for machine in machines:
            machine.daemon_env.update(store.env)
            machine.start()
        try:
            config = {
                "seed": args.seed, "repo": REPO, "batch_id": BATCH, "targets": args.targets,
                "hb_ttl": HB_TTL, "claim_ttl": 60, "call_timeout": 20.0,
                "quota": max(1, args.ops // args.agents), "history_dir": str(self.out / "history"),
                "machines": [{"socket": str(m.socket), "env": m.env} for m in machines],
                "placement": {name: i % 2 for i, name in enumerate(self.agents)},
            }
            config_path = self.out / "config.json"
            config_path.write_text(json.dumps(config, indent=2))
            started = time.monotonic()
            for name in self.agents:
                self.start_agent(name, config_path)
            stop = threading.Event()
            injector = threading.Thread(target=self.inject, args=(machines, store, config_path, stop))
            injector.start()
            deadline = started + args.timeout
            while time.monotonic() < deadline:
                with self.lock:
                    if all(proc.poll() is not None for proc in self.procs.values()):
                        break
                time.sleep(0.2)
            stop.set()
            injector.join()
            timed_out = any(proc.poll() is None for proc in self.procs.values())
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait()
            wall = time.monotonic() - started
        finally:
            for machine in machines:
                machine.stop()
        ops = history.load(sorted((self.out / "history").glob("*.jsonl")))
        final = _final_state(store, args.targets)
        violations = history.check(ops, final)
        (self.out / "violations.txt").write_text("\n\n".join(v.describe() for v in violations))
        return {"backend": args.backend, **history.summary(ops, violations),
                "faults_injected": len(self.injected), "faults": _counted(self.injected),
                "agents": args.agents, "wall_seconds": round(wall, 1), "timed_out": timed_out}


def _counted(injected: list[tuple[str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, _detail in injected:
        out[kind] = out.get(kind, 0) + 1
    return out


REPO, BATCH = "sim/history", "hist"


def _holders(store: Backend, targets: int) -> list[str]:
    """The agents holding an active claim now (read directly; none while the backend is down)."""
    try:
        claims = _read(store, lambda handle: _claims(handle, targets))
    except Exception:  # noqa: BLE001 - the backend is down (another fault): anyone will do
        return []
    return [c["agent_id"] for c in claims.values() if c and c.get("status") == "active"]


def _final_state(store: Backend, targets: int) -> history.FinalState:
    async def read(handle: Any) -> history.FinalState:
        from agentcoordd.store.base import list_all

        page = await list_all(handle, f"events/{BATCH}")
        messages = {entry.data.get("message") for entry in page.entries
                    if isinstance(entry.data, dict)}
        return history.FinalState(await _claims(handle, targets),
                                  {m for m in messages if isinstance(m, str)})

    return _read(store, read)


async def _claims(handle: Any, targets: int) -> dict[str, Any]:
    claims = {}
    for target in range(targets):
        found = await handle.get(f"claims/{REPO}/{target}.json")
        claims[str(target)] = found.data if found is not None else None
    return claims


def _read(store: Backend, work: Any) -> Any:
    """work(a Store of the backend), run to completion."""
    async def run() -> Any:
        handle = store.store()
        try:
            return await work(handle)
        finally:
            await handle.aclose()

    return anyio.run(run)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim history", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("local", "http", "etcd"), default="local")
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--targets", type=int, default=6)
    ap.add_argument("--faults", default="all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="hard cap on the run (s)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="achistory."))
    result = Run(args, out).execute()
    result["out"] = str(out)
    if args.json:
        print(json.dumps(result))
    else:
        print(" ".join(f"{k}={v}" for k, v in result.items()))
        violations = (out / "violations.txt").read_text()
        if violations:
            print(violations)
    return 0 if result["violations"] == 0 and not result["timed_out"] else 1


if __name__ == "__main__":
    sys.exit(main())
