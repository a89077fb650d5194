"""`run --agent-id … --repo … --target … [claim flags] -- COMMAND …`.

Claim first (exit 3 if refused, COMMAND never runs), with a keep-alive lane
that watches COMMAND's pid: the child is forked before the claim and held at
a gate, so the daemon watches the very process that then execs COMMAND (exec
keeps pid and start time). SIGINT/SIGTERM/SIGHUP are forwarded to it. When it
exits the claim is released (`--done-on-success`: `--terminal done` on exit
0, closing `--lane` or the one lane listing the target) and ctl exits with
COMMAND's code (128+N when a signal N killed it) — unless that terminal
release fails: then the claim is released plainly (no claim stays behind for
its lease) and ctl exits with the failed release's code (2 when unclear). If the
claim is fenced while COMMAND runs (someone took it over), COMMAND gets
SIGTERM after `--fence-grace` seconds, then SIGKILL after as long again.
COMMAND runs with the grant in its environment: AGENT_COORD_FENCING_TOKEN,
AGENT_COORD_FENCE_REPO and AGENT_COORD_FENCE_TARGET (docs/fencing.md).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from agentcoordctl import client, lanes, render, spec
from agentcoordctl.lanes import HEARTBEAT_TTL, IDLE_TIMEOUT, RENEW_EVERY
from agentcoordctl.options import (
    AGENT_ID, BACKEND, BATCH_ID, BRANCH, METADATA, REPO, TARGET, TTL, eprint, fail, say_notices,
    seconds, send,
)
from agentcoordctl.spec import Arg, Exit, Opt
from agentcoordd import protocol as p

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The lane ends with COMMAND (its pid is watched); an idle timer would only cut
# a long command's keep-alive short.
RUN_IDLE_TIMEOUT = 365 * 86400.0
POLL = 0.05
LANE_POLL = 2.0


def run_command(*, command: list[str], agent_id: str, repo: str, target: str,
                batch_id: str | None, branch: str | None, ttl: int | None,
                renew_every: float | None, idle_timeout: float | None,
                heartbeat_ttl: int | None, fence_grace: float, done_on_success: bool,
                lane: str | None, meta: Any, selection: p.Selection) -> None:
    if not command:
        raise fail("run needs a command: agentcoordctl run … -- COMMAND [ARGS]", p.EXIT_USAGE)
    if fence_grace < 0:
        raise fail("--fence-grace must not be negative", p.EXIT_USAGE)
    if lane is not None and not done_on_success:
        raise fail("--lane only applies with --done-on-success", p.EXIT_USAGE)
    chosen = selection

    child, gate = _fork_gated(command)
    ka = lanes.keep_alive_request(True, renew_every=renew_every, watch_pid=str(child),
                                  idle_timeout=idle_timeout or RUN_IDLE_TIMEOUT,
                                  heartbeat_ttl=heartbeat_ttl)
    try:
        response = send(p.Claim(agent_id=agent_id, repo=repo, target=target, batch_id=batch_id,
                                branch=branch, ttl=ttl, meta=meta, keep_alive=ka,
                                selection=chosen))
    except BaseException:
        _abort(child, gate)
        raise
    _report(response, render.claim)
    if response.exit_code != 0:
        _abort(child, gate)
        raise Exit(response.exit_code)

    for signum in FORWARDED:
        signal.signal(signum, lambda s, _f: _forward(child, s))
    claim = (response.payload or {}).get("claim") or {} if isinstance(response.payload, dict) else {}
    token = claim.get("fencing_token")
    os.write(gate, b"1" + b"\0".join(f"{k}={v}".encode() for k, v in (
        ("AGENT_COORD_FENCING_TOKEN", token), ("AGENT_COORD_FENCE_REPO", repo),
        ("AGENT_COORD_FENCE_TARGET", target)) if v is not None))
    os.close(gate)
    code, fenced = _supervise(child, agent_id, fence_grace, renew_every)

    if fenced:
        eprint(f"agentcoordctl run: not releasing {repo}#{target}: the claim was taken over")
        raise Exit(code)
    if done_on_success and code == 0:
        closed, error = _release(p.Release(agent_id=agent_id, repo=repo, target=target,
                                           terminal="done", lane=lane, selection=chosen))
        if closed == 0:
            raise Exit(0)
        hint = " (pass --lane NAME)" if lane is None and "exactly one lane" in error else ""
        eprint(f"agentcoordctl run: COMMAND succeeded but the terminal release failed{hint}; "
               f"releasing {repo}#{target} without closing the lane")
        plain, _ = _release(p.Release(agent_id=agent_id, repo=repo, target=target, selection=chosen))
        if plain != 0:
            eprint(f"agentcoordctl run: the plain release failed too: the claim on {repo}#{target} "
                   "stays until its lease expires")
        raise Exit(closed)
    _release(p.Release(agent_id=agent_id, repo=repo, target=target, selection=chosen))
    raise Exit(code)


def _release(request: p.Release) -> tuple[int, str]:
    """Send a release and report it on stderr: (its exit code — 2 when unclear, its error)."""
    try:
        released = send(request)
    except Exit as exc:  # the daemon was not reached (send printed why)
        return exc.code or p.EXIT_OPERATIONAL, ""
    _report(released, render.release)
    return released.exit_code, released.error or ""


def _fork_gated(command: list[str]) -> tuple[int, int]:
    """Fork a child that execs COMMAND only once the gate says so."""
    read_end, write_end = os.pipe()  # both close-on-exec
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(write_end)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            message = b""
            while chunk := os.read(read_end, 65536):
                message += chunk
            os.close(read_end)
            if message[:1] != b"1":
                os._exit(125)
            for item in message[1:].split(b"\0"):  # the grant: AGENT_COORD_FENCING_TOKEN, …
                key, _, value = item.decode().partition("=")
                if key:
                    os.environ[key] = value
            os.execvp(command[0], command)
        except FileNotFoundError:
            os.write(2, f"agentcoordctl run: command not found: {command[0]}\n".encode())
            os._exit(127)
        except BaseException as exc:  # noqa: BLE001 - never return into ctl's code in the child
            os.write(2, f"agentcoordctl run: cannot run {command[0]}: {exc}\n".encode())
            os._exit(126)
    os.close(read_end)
    return pid, write_end


def _abort(child: int, gate: int) -> None:
    """The claim failed: the child exits at the closed gate without running COMMAND."""
    try:
        os.close(gate)
    except OSError:
        pass
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        pass


def _forward(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


def _report(response: p.Response, text: Any) -> None:
    """A claim/release answer on stderr: stdout belongs to COMMAND."""
    say_notices(response)
    for warning in response.warnings:
        eprint(f"warning: {warning}")
    if response.error:
        eprint(response.error)
    if response.exit_code == 0 and isinstance(response.payload, dict):
        line = text(response.payload)
        if line:
            eprint(line)


def _supervise(child: int, agent_id: str, grace: float, renew_every: float | None) -> tuple[int, bool]:
    """Wait for the child; enforce the fence grace. Returns (exit code, fenced)."""
    poll_every = min(LANE_POLL, renew_every) if renew_every else LANE_POLL
    next_poll = time.monotonic() + poll_every
    fenced_at: float | None = None
    termed_at: float | None = None
    killed = False
    while True:
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            return 1, fenced_at is not None
        if pid == child:
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status), fenced_at is not None
            return os.WEXITSTATUS(status), fenced_at is not None
        now = time.monotonic()
        if fenced_at is None and now >= next_poll:
            next_poll = now + poll_every
            row = _lane(agent_id)
            if row is not None and row.get("state") == "fenced":
                fenced_at = now
                eprint(f"agentcoordctl run: the claim was taken over by "
                       f"{row.get('new_holder') or 'another agent'}; stopping COMMAND in {grace:g}s")
        if fenced_at is not None:
            if termed_at is None and now >= fenced_at + grace:
                termed_at = now
                _forward(child, signal.SIGTERM)
            elif termed_at is not None and not killed and now >= termed_at + grace:
                killed = True
                _forward(child, signal.SIGKILL)
        time.sleep(POLL)


def _lane(agent_id: str) -> dict[str, Any] | None:
    try:
        return lanes.lane_state(agent_id)
    except client.ClientError:
        return None


COMMANDS = (spec.Command(
    ("run",), "Claim, run COMMAND with a keep-alive lane watching it, release, exit with its code.",
    (Arg("command", "-- COMMAND [ARGS]...", "What to run while holding the claim.", rest=True),
     AGENT_ID, REPO, TARGET, BATCH_ID, BRANCH, TTL, RENEW_EVERY, IDLE_TIMEOUT, HEARTBEAT_TTL,
     Opt("--fence-grace", "fence_grace", "custom", default=10.0, parse=seconds, metavar="SECONDS",
         help="After a takeover: SIGTERM COMMAND after this long, SIGKILL after as long again."),
     Opt("--done-on-success", "done_on_success", "flag",
         help="Release with --terminal done when COMMAND exits 0; if that fails, release "
              "plainly and exit with its code."),
     Opt("--lane", "lane", metavar="NAME",
         help="With --done-on-success: the batch lane to close (when several list the target)."),
     METADATA, BACKEND),
    run_command, interspersed=False),)
