"""One scripted step -> one ctl call, through either transport.

* `ctl`: runs the real `agentcoordctl` binary as a subprocess (what an agent
  does). Its cost is dominated by interpreter start-up (~0.1 s of CPU a call).
* `wire`: sends the same request Struct ctl would build (agentcoordd.protocol)
  over the daemon's socket, from inside the worker process, and evaluates
  `wait` conditions with ctl's own check functions. Used where hundreds of
  agents share 2 cores (bench/sim_scale.py); it measures the daemon and the
  backend, not Python start-up.

Both log the identical `argv` (the ctl command line), so plans, logs and
replays do not depend on the transport.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.plan import REPO

WAIT_TIMEOUT = 900.0
WAIT_INTERVAL = 0.25
CTL = str(Path(sys.executable).with_name("agentcoordctl"))


@dataclass
class Ctx:
    agent: str
    batch: str
    hb_ttl: int
    claim_ttl: int
    idle_timeout: float
    watch_pid: int


def argv_for(step: dict[str, Any], c: Ctx) -> list[str]:
    op = step["op"]
    tgt = ["--repo", REPO, "--target", step.get("target", "")]
    if op == "claim":
        return ["claim", "--agent-id", c.agent, *tgt, "--batch-id", c.batch, "--phase", step["phase"],
                "--ttl", str(c.claim_ttl), "--keep-alive", "--heartbeat-ttl", str(c.hb_ttl),
                "--idle-timeout", f"{c.idle_timeout:g}", "--watch-pid", str(c.watch_pid), "--json"]
    if op == "heartbeat":
        return ["heartbeat", "--agent-id", c.agent, *tgt, "--batch-id", c.batch, "--phase", step["phase"],
                "--ttl", str(c.hb_ttl), "--json"]
    if op == "release_terminal":
        return ["release", "--agent-id", c.agent, *tgt, "--terminal", step.get("terminal", "done"), "--json"]
    if op == "release_handoff":
        return ["release", "--agent-id", c.agent, *tgt, "--handoff-to", step["to"],
                "--handoff-note", f"sim handoff of {step['lane']}", "--json"]
    if op == "wait_unblocked":
        return ["wait", "--until-unblocked", "--batch-id", c.batch, "--lane", step["lane"],
                "--timeout", f"{WAIT_TIMEOUT:g}", "--interval", f"{WAIT_INTERVAL:g}", "--json"]
    if op == "wait_free":
        return ["wait", "--until-free", *tgt, "--timeout", f"{WAIT_TIMEOUT:g}",
                "--interval", f"{WAIT_INTERVAL:g}", "--json"]
    if op == "claim_next":  # a pool lane: whichever ready one comes first
        return ["claim", "--next", "--agent-id", c.agent, "--batch-id", c.batch, "--phase", "plan",
                "--ttl", str(c.claim_ttl), "--keep-alive", "--heartbeat-ttl", str(c.hb_ttl),
                "--idle-timeout", f"{c.idle_timeout:g}", "--watch-pid", str(c.watch_pid), "--json"]
    if op == "wait_ready":
        return ["wait", "--until-ready", "--batch-id", c.batch, "--agent-id", c.agent,
                "--timeout", f"{step['seconds']:g}", "--interval", f"{WAIT_INTERVAL:g}", "--json"]
    if op == "ready":
        return ["ready", "--batch-id", c.batch, "--agent-id", c.agent, "--json"]
    if op == "stop_check":
        return ["heartbeat", "--agent-id", c.agent, "--batch-id", c.batch, "--status", "done",
                "--ttl", str(c.hb_ttl), "--json"]
    raise ValueError(f"step {op} is not a ctl call")


def normalize(argv: list[str], batch: str) -> list[str]:
    """The argv as compared on replay: run-specific values (batch id, pids) masked."""
    out = []
    prev = ""
    for a in argv:
        if prev == "--watch-pid":
            a = "<pid>"
        out.append(a.replace(batch, "<batch>"))
        prev = a
    return out


@dataclass
class Result:
    rc: int
    payload: Any
    err: str


class CtlTransport:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def call(self, argv: list[str], timeout: float) -> Result:
        try:
            proc = subprocess.run([CTL, "--timeout", f"{min(timeout, 60):g}", *argv], env=self.env,
                                  capture_output=True, timeout=timeout + 30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Result(2, None, "ctl subprocess timed out")
        payload = None
        out = proc.stdout.decode("utf-8", "replace").strip()
        if out:
            try:
                payload = json.loads(out)
            except ValueError:
                payload = None
        return Result(proc.returncode, payload, proc.stderr.decode("utf-8", "replace")[-500:])


class WireTransport:
    """The same request Structs ctl sends, over the daemon socket (no subprocess)."""

    def __init__(self, env: dict[str, str]) -> None:
        from agentcoordctl import client

        self.env = env
        self.client = client
        self.path = env["AGENT_COORD_SOCKET"]
        self.caller_env = {k: v for k, v in env.items()
                           if k.startswith(client.FORWARD_PREFIXES) or k in client.FORWARD_NAMES}

    def _caller(self) -> Any:
        from agentcoordd import protocol as p

        return p.Caller(env=self.caller_env, cwd=os.getcwd(), pid=os.getpid())

    def _send(self, message: Any, timeout: float) -> Result:
        message.caller = self._caller()
        try:
            resp, _ = self.client.request(message, timeout=timeout, autostart=False, env=self.env,
                                          path=self.path, notify=lambda _m: None)
        except self.client.ClientError as exc:
            return Result(exc.exit_code, None, exc.message)
        return Result(resp.exit_code, resp.payload, resp.error or "")

    def call(self, argv: list[str], timeout: float) -> Result:
        from agentcoordd import protocol as p
        from agentcoordd.model.records import Metadata

        args = _parse(argv)
        cmd = argv[0]
        t = min(timeout, 60.0)
        if cmd == "claim" and "next" in args:
            ka = p.KeepAlive(watch_pid=int(args["watch-pid"]), idle_timeout=float(args["idle-timeout"]),
                             heartbeat_ttl=int(args["heartbeat-ttl"]))
            return self._send(p.ClaimNext(agent_id=args["agent-id"], batch_id=args["batch-id"],
                                          ttl=int(args["ttl"]), meta=Metadata(phase=args["phase"]),
                                          keep_alive=ka), t)
        if cmd == "ready":
            return self._send(p.Ready(batch_id=args["batch-id"], agent_id=args.get("agent-id")), t)
        if cmd == "claim":
            ka = p.KeepAlive(watch_pid=int(args["watch-pid"]), idle_timeout=float(args["idle-timeout"]),
                             heartbeat_ttl=int(args["heartbeat-ttl"]))
            return self._send(p.Claim(agent_id=args["agent-id"], repo=args["repo"], target=args["target"],
                                      batch_id=args["batch-id"], ttl=int(args["ttl"]),
                                      meta=Metadata(phase=args["phase"]), keep_alive=ka), t)
        if cmd == "heartbeat":
            return self._send(p.Heartbeat(agent_id=args["agent-id"], repo=args.get("repo"),
                                          target=args.get("target"), batch_id=args.get("batch-id"),
                                          status=args.get("status"), ttl=int(args["ttl"]),
                                          meta=Metadata(phase=args.get("phase"))), t)
        if cmd == "release":
            return self._send(p.Release(agent_id=args["agent-id"], repo=args["repo"], target=args["target"],
                                        terminal=args.get("terminal"), handoff_to=args.get("handoff-to"),
                                        handoff_note=args.get("handoff-note")), t)
        if cmd == "wait":
            return self._wait(args, timeout)
        raise ValueError(f"wire transport has no mapping for {cmd}")

    def _wait(self, args: dict[str, str], timeout: float) -> Result:
        from agentcoordctl.wait import CHECKS, DAEMON_WAITS, wait_slices
        from agentcoordd import protocol as p

        mode = next(m for m in (*CHECKS, *DAEMON_WAITS) if m in args)
        deadline = time.monotonic() + float(args.get("timeout", WAIT_TIMEOUT))
        interval = float(args.get("interval", WAIT_INTERVAL))
        if mode in DAEMON_WAITS:  # polled by the daemon, as ctl does it
            def request(slice_: float) -> Any:
                return DAEMON_WAITS[mode](args.get("batch-id"), args.get("lane"), slice_, interval,
                                          p.Selection(), args.get("agent-id"))

            def send(message: Any, slice_timeout: float) -> Any:
                message.caller = self._caller()
                resp, _ = self.client.request(message, timeout=slice_timeout, autostart=False,
                                              env=self.env, path=self.path, notify=lambda _m: None)
                return resp

            met, _, why = wait_slices(request, timeout=deadline - time.monotonic(), interval=interval,
                                      send=send)
            return Result(0 if met else 2, {"condition": mode, "met": met, "detail": why}, "" if met else why)
        why = ""
        while True:
            if mode == "until-free":
                req: Any = p.Status(repo=args["repo"], target=args["target"])
            else:
                req = p.Status(batch_id=args["batch-id"], events=0)
            res = self._send(req, 30.0)
            if res.rc == 0 and isinstance(res.payload, dict):
                met, why = CHECKS[mode](res.payload, batch_id=args.get("batch-id"), lane=args.get("lane"))
                if met:
                    return Result(0, {"condition": mode, "met": True, "detail": why}, "")
            else:
                why = res.err
            if time.monotonic() + interval > deadline:
                return Result(2, {"condition": mode, "met": False, "detail": why}, why)
            time.sleep(interval)


def _parse(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 1
    while i < len(argv):
        key = argv[i].removeprefix("--")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[key] = argv[i + 1]
            i += 2
        else:
            out[key] = "1"
            i += 1
    return out


def transport(kind: str, env: dict[str, str]) -> CtlTransport | WireTransport:
    return WireTransport(env) if kind == "wire" else CtlTransport(env)
