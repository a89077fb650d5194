"""Capacity reservations end to end, the same on every backend (local, Worker, etcd):
the contract's retry/conflict/refusal replay run as `agentcoordctl` commands, and the
last-slot race — P planners at once, per round, for the one free slot of a fresh
profile: exactly one reservation is accepted, every other planner exits 4 with
`RESERVATION_REFUSED:`, and the profile then holds exactly the winner's lane.

The race sends each reserve the way ctl does (hello + one Reserve frame on a
daemon's socket, the caller's environment) from threads, so 16 x 50 calls fit a
2-core machine's time budget; the replay runs real ctl subprocesses.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentcoordctl import client
from agentcoordd import protocol as p

REPLAY = Path(__file__).resolve().parents[2] / "schema/state/v1/capacity-reservation/fixtures/replay"
MACHINE = "planner-box"

Planner = tuple[str, dict[str, str]]  # a daemon's socket, a caller's environment
Ctl = Callable[..., Any]  # ctl(*args, env=...) -> CompletedProcess


def wire(planner: Planner, message: Any, timeout: float = 60) -> p.Response:
    socket, env = planner
    message.caller = client.caller(env)
    response, _ = client.request(message, timeout=timeout, autostart=False, env=env, path=socket)
    return response


def ok(response: p.Response) -> Any:
    assert response.exit_code == 0, response.error
    return response.payload


def seed_round(planner: Planner, profile: str, occupied: int, slots: int) -> None:
    """A fresh profile with `slots` slots, `occupied` of them taken by running lanes."""
    ok(wire(planner, p.CapacityProfileSet(profile_id=profile, max_concurrency=slots)))
    ok(wire(planner, p.CapacityInboxSet(inbox_id=f"{profile}-in", profile_id=profile)))
    for i in range(occupied):
        ok(wire(planner, p.CapacityOccupancySet(lane_ref=f"{profile}:running-{i}", profile_id=profile,
                                                inbox_id=f"{profile}-in", state="occupied")))


def race_last_slot(planners: Sequence[Planner], *, rounds: int, contenders: int = 16,
                   slots: int = 3, tag: str = "race") -> list[list[tuple[int, str]]]:
    """Per round: `contenders` planners (spread over `planners`) reserve a different lane
    each for the last free slot, released together by a barrier. Checked per round."""
    results = []
    with ThreadPoolExecutor(contenders) as pool:
        for r in range(rounds):
            profile = f"{tag}-{r}"
            seed_round(planners[0], profile, occupied=slots - 1, slots=slots)
            gate = threading.Barrier(contenders)

            def one(k: int, profile: str = profile, gate: threading.Barrier = gate) -> tuple[int, str]:
                message = p.Reserve(
                    reservation_id=f"{profile}-p{k}", profile_id=profile, inbox_id=f"{profile}-in",
                    batch_id=profile, owner_id=f"planner-{k}", instance_id="run-1",
                    lane_refs=[f"{profile}:lane-{k}"], ttl_seconds=600)
                planner = planners[k % len(planners)]
                gate.wait(30)
                response = wire(planner, message)
                return response.exit_code, response.error or ""

            outcome = list(pool.map(one, range(contenders)))
            check_round(planners[0], profile, outcome)
            results.append(outcome)
    return results


def check_round(planner: Planner, profile: str, outcome: list[tuple[int, str]]) -> None:
    codes = sorted(code for code, _ in outcome)
    assert codes == [0] + [4] * (len(outcome) - 1), (profile, outcome)
    assert all(error.startswith("RESERVATION_REFUSED: ") for code, error in outcome if code == 4)
    winner = next(k for k, (code, _) in enumerate(outcome) if code == 0)
    view = ok(wire(planner, p.CapacityShow(profile_id=profile)))
    assert view["remaining_slots"] == 0
    assert view["active_reservations"] == [f"{profile}-p{winner}"]
    assert f"{profile}:lane-{winner}" in view["used_lane_refs"]


# ---- the retry/conflict/refusal replay as ctl commands --------------------------------


def _reserve_args(request: dict[str, Any]) -> list[str]:
    args = ["reserve", "--id", request["reservation_id"], "--profile",
            request["capacity_profile_id"], "--inbox", request["inbox_id"],
            "--owner-id", request["owner_id"], "--instance-id", request["instance_id"]]
    if "batch_id" in request:
        args += ["--batch-id", request["batch_id"]]
    if "planning_attempt_id" in request:
        args += ["--planning-attempt", request["planning_attempt_id"]]
    if "ttl_seconds" in request:
        args += ["--ttl", str(request["ttl_seconds"])]
    for ref in request["lane_refs"]:
        args += ["--lane", ref]
    return args


def replay_retry_conflict_and_refusals(ctl: Ctl, env: dict[str, str],
                                       workspace: str = "default") -> None:
    """Every request of the fixture as `agentcoordctl reserve`, in order; the outcome is
    read from the exit code and the one line (accepted/idempotent on stdout, exit 0;
    RESERVATION_REFUSED / RESERVATION_CONFLICT on stderr, exit 4)."""
    fixture = json.loads((REPLAY / "retry-conflict-and-refusals.json").read_text())
    env = {**env, "AGENT_COORD_MACHINE_ID": MACHINE}
    real_ctl = ctl

    def ctl(*args: str, env: dict[str, str]) -> Any:  # every command in the test's workspace
        return real_ctl(*args, "--workspace", workspace, env=env)

    profile = fixture["capacity_profile"]
    done = ctl("capacity", "profile", profile["capacity_profile_id"], "--max-concurrency",
               str(profile["max_concurrency"]), env=env)
    assert done.returncode == 0, done.stderr
    for inbox in fixture["inboxes"]:
        flags = [] if inbox["status"] == "enabled" else ["--disabled"]
        done = ctl("capacity", "inbox", inbox["inbox_id"], "--profile", inbox["capacity_profile_id"],
                   *flags, env=env)
        assert done.returncode == 0, done.stderr
    for occ in fixture["lane_occupancies"]:
        reason = ["--reason", occ["blocked_reason"]] if "blocked_reason" in occ else []
        done = ctl("capacity", "occupancy", occ["lane_ref"], "--profile", occ["capacity_profile_id"],
                   "--inbox", occ["inbox_id"], "--state", occ["state"], *reason, env=env)
        assert done.returncode == 0, done.stderr
    outcomes = {}
    for request in fixture["requests"]:
        assert request["owner_machine"] == MACHINE
        done = ctl(*_reserve_args(request), "--json", env=env)
        if done.returncode == 0:
            outcomes[request["attempt"]] = json.loads(done.stdout)["outcome"]
        else:
            assert done.returncode == 4, (request["attempt"], done.returncode, done.stderr)
            line = done.stderr.decode().strip()
            assert "\n" not in line and "Traceback" not in line, line
            outcomes[request["attempt"]] = line.split(":", 1)[0]
    assert outcomes == fixture["expected"]["outcomes"]
    shown = ctl("capacity", "show", "--profile", profile["capacity_profile_id"], "--json", env=env)
    view = json.loads(shown.stdout)
    assert view["used_lane_refs"] == fixture["expected"]["effective_used_lane_refs"]
    assert view["remaining_slots"] == fixture["expected"]["remaining_slots"]


# ---- the use cases directly (coord.capacity on any store, a fake clock) ---------------

REQUEST_KEYS = ("reservation_id", "capacity_profile_id", "inbox_id", "batch_id",
                "planning_attempt_id", "owner_id", "instance_id", "lane_refs", "ttl_seconds")


def replay(name: str) -> dict[str, Any]:
    return json.loads((REPLAY / name).read_text())


async def seed(ctx: Any, *, max_concurrency: int, occupied: Sequence[str] = (),
               inboxes: tuple[str, ...] = ("triage",), ws: str = "default") -> None:
    from agentcoordd.coord import capacity

    await capacity.set_profile(ctx, workspace=ws, profile_id="claude-pool",
                               max_concurrency=max_concurrency, enabled=True)
    for inbox in inboxes:
        await capacity.set_inbox(ctx, workspace=ws, inbox_id=inbox, profile_id="claude-pool",
                                 enabled=True)
    for ref in occupied:
        await capacity.set_occupancy(ctx, workspace=ws, lane_ref=ref, profile_id="claude-pool",
                                     inbox_id=inboxes[0], state="occupied")


async def attempt(ctx: Any, request: dict[str, Any], ws: str = "default") -> str:
    """The outcome of one reserve: accepted | idempotent | the refusal's name."""
    from agentcoordd.coord import capacity
    from agentcoordd.model.errors import ReservationRefused

    try:
        made = await capacity.reserve(ctx, workspace=ws, request={
            k: request[k] for k in REQUEST_KEYS if k in request})
    except ReservationRefused as exc:
        assert exc.message.startswith(f"{exc.outcome}: ")
        return exc.outcome
    return made["outcome"]


async def used(ctx: Any, ws: str = "default") -> dict[str, Any]:
    from agentcoordd.coord import capacity

    return await capacity.show_capacity(ctx, workspace=ws, profile_id="claude-pool")
