"""Waiting in the daemon: poll a condition until it holds or the budget runs out.

`wait --until-unblocked` asks one question about one lane: is every dependency
done? It reads only what answers it — the lane's manifest, the manifests its
dependencies live in, and each unfinished dependency's lane_closed record and
owner heartbeat — never a whole batch status. A recorded lane_closed counts as
the dependency's terminal state even before the manifest stamp lands (the
event is the authoritative record; the stamp is derived from it).

The daemon hands these use cases a store whose reads are shared for a moment
between concurrent waiters (`daemon.recent`), so hundreds of agents polling
one batch cost a few reads per tick, not hundreds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from agentcoordd.coord.batches import (
    lane_dependencies, lane_name_of, lane_owner_of, lane_targets_of, split_dependency,
)
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.status import satisfies_dependency
from agentcoordd.store.base import Forbidden, InvalidRecord, StoreError

Check = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
_LAST_STEP = 0.05  # a wait ends rather than sleep less than this before its last check


async def poll_until(check: Check, *, poll_seconds: float, timeout: float | None,
                     sleep: Any = None, batch: tuple[Ctx, str] | None = None) -> dict[str, Any]:
    """Run `check` until it says met (exit_code 0) or `timeout` seconds passed (exit_code 2,
    `timed_out`). The answer is the last check's state.

    The budget counts the checks too (a slow backend's reads), and no check starts that
    could not end in it (as long as the last one took), so the answer always comes before
    the caller's deadline: a slice never ends as a timed-out call. With `batch`, a batch
    that has neither a manifest nor an event (a mistyped --batch-id) ends the wait at once
    (`unknown_batch`, exit_code 2): nothing will ever satisfy it."""
    if sleep is None:
        sleep = anyio.sleep
    if batch is not None:
        why = await unknown_batch(*batch)
        if why is not None:
            return nothing_to_wait_for(batch[1], why)
    started = time.monotonic()
    waited = 0.0  # slept: what a test's fake sleep advances
    while True:
        began = time.monotonic()
        met, state = await check()
        took = time.monotonic() - began
        if met:
            return {**state, "exit_code": 0}
        step = poll_seconds
        if timeout is not None:  # room for a sleep and one more check like the last one?
            step = min(poll_seconds, timeout - max(waited, time.monotonic() - started) - took)
            if step < min(poll_seconds, _LAST_STEP):
                return {**state, "timed_out": True, "exit_code": 2}
        await sleep(step)
        waited += step


def nothing_to_wait_for(batch_id: str, why: str, **about: Any) -> dict[str, Any]:
    """A wait's answer when nothing will ever meet it: exit 2 at once, naming why."""
    return {"batch_id": batch_id, **about, "detail": why, "unknown_batch": True, "exit_code": 2,
            "exit_error": why}


async def unknown_batch(ctx: Ctx, batch_id: str) -> str | None:
    """Why a wait on `batch_id` has nothing to wait for — it has no manifest and no event
    — else None (also when that cannot be read: the wait goes on and says why)."""
    try:
        if await ctx.store.get(ids.batch_path(batch_id)) is not None:
            return None
        if (await ctx.store.list(ids.events_prefix(batch_id), limit=1)).entries:
            return None
    except (StoreError, UsageError):
        return None
    files = ctx.store.capabilities.files
    if files is not None and await anyio.to_thread.run_sync(files.jsonl_batch_file, batch_id):
        return None
    return f"batch {batch_id} is not registered (check --batch-id)"


async def read_manifest(ctx: Ctx, batch_id: str) -> dict[str, Any] | str:
    """The batch manifest as an object, or why it cannot be used."""
    try:
        current = await ctx.store.get(ids.batch_path(batch_id))
    except (InvalidRecord, Forbidden) as exc:
        return f"batch {batch_id} unreadable: {exc.message}"
    if current is None:
        return f"batch {batch_id} not found"
    if not isinstance(current.data, dict):
        return f"batch {batch_id} unreadable: not a JSON object"
    return current.data


def find_lane(manifest: dict[str, Any], name: str) -> dict[str, Any] | None:
    lanes = manifest.get("lanes")
    for lane in lanes if isinstance(lanes, list) else []:
        if isinstance(lane, dict) and lane_name_of(lane) == name:
            return lane
    return None


async def declared_terminal(ctx: Ctx, batch_id: str, lane: dict[str, Any]) -> str | None:
    """The lane's terminal state: the manifest stamp, else its lane_closed record."""
    if lane.get("terminal") is not None:
        return str(lane["terminal"])
    name = lane_name_of(lane)
    if name is None:
        return None
    try:
        current = await ctx.store.get(ids.event_path(batch_id, ids.lane_closed_event_id(name)))
    except (InvalidRecord, Forbidden, UsageError):
        return None
    if current is not None and isinstance(current.data, dict):
        terminal = current.data.get("terminal")
        return terminal if isinstance(terminal, str) else None
    return None


async def dependency_status(ctx: Ctx, batch_id: str, lane: dict[str, Any]) -> str | None:
    """The lane's status as its dependents see it: the declared terminal (manifest stamp
    or lane_closed record), else its owner's heartbeat status, else the planned status."""
    from agentcoordd.coord import projections as pj
    from agentcoordd.coord.status import owner_heartbeat

    declared = await declared_terminal(ctx, batch_id, lane)
    if declared is not None:
        return declared
    owner = lane_owner_of(lane)
    beat = await owner_heartbeat(ctx, owner) if owner else pj.HB_MISSING
    return pj.lane_status(lane, beat)


async def blocked_refs(ctx: Ctx, entry: dict[str, Any],
                       manifests: dict[str, dict[str, Any] | str],
                       statuses: dict[tuple[str, str], str | None] | None = None) -> list[str]:
    """The refs of `entry`'s depends_on that are not satisfied: the one dependency rule
    (`wait --until-unblocked`, `ready`, `claim --next`). `manifests` caches the batches
    read (batch id -> manifest, or why it is unusable); `statuses` the dependency
    statuses (batch, lane) -> status, so one pass over a batch reads each once."""
    blocked: list[str] = []
    for ref in lane_dependencies(entry):
        parts = split_dependency(ref)
        if parts is None:
            blocked.append(ref)  # malformed: never satisfied (as in status)
            continue
        dep_batch, dep_name = parts
        if dep_batch not in manifests:
            manifests[dep_batch] = await read_manifest(ctx, dep_batch)
        manifest = manifests[dep_batch]
        dep = find_lane(manifest, dep_name) if isinstance(manifest, dict) else None
        if dep is None:
            blocked.append(ref)
            continue
        if statuses is None or parts not in statuses:
            status = await dependency_status(ctx, dep_batch, dep)
            if statuses is not None:
                statuses[parts] = status
        else:
            status = statuses[parts]
        if not satisfies_dependency(status):
            blocked.append(ref)
    return blocked


async def unblocked_state(ctx: Ctx, batch_id: str, lane: str) -> tuple[bool, dict[str, Any]]:
    """(met, state): is every dependency of `lane` in `batch_id` satisfied?"""
    ids.batch_id(batch_id)
    ids.lane_name(lane)
    state: dict[str, Any] = {"batch_id": batch_id, "lane": lane}
    manifests: dict[str, dict[str, Any] | str] = {batch_id: await read_manifest(ctx, batch_id)}
    own = manifests[batch_id]
    if isinstance(own, str):
        return False, {**state, "detail": own}
    entry = find_lane(own, lane)
    if entry is None:
        return False, {**state, "detail": f"lane {lane} not in batch {batch_id}"}
    deps = lane_dependencies(entry)
    blocked = await blocked_refs(ctx, entry, manifests)
    state.update(deps=deps, blocked_on=blocked)
    if blocked:
        return False, {**state, "detail": f"lane {lane} of {batch_id} blocked on {', '.join(blocked)}"}
    return True, {**state, "detail": f"lane {lane} of {batch_id} is unblocked"}


async def blocked_lanes_of_target(ctx: Ctx, batch_id: str, repo: str, target: str,
                                  agent_id: str) -> list[tuple[str, list[str]]]:
    """(lane, the refs it is blocked on) for each lane of `batch_id` that works on
    repo#target and is blocked: the lane a claim takes, by its target (the claimant's
    own lane first when several share it)."""
    manifest = await read_manifest(ctx, batch_id)
    if isinstance(manifest, str) or manifest.get("repo") not in (None, repo):
        return []
    lanes = manifest.get("lanes")
    matching = [lane for lane in (lanes if isinstance(lanes, list) else [])
                if isinstance(lane, dict) and target in lane_targets_of(lane)
                and lane_name_of(lane) is not None]
    owned = [lane for lane in matching if lane_owner_of(lane) == agent_id]
    out = []
    for lane in owned or matching:
        name = str(lane_name_of(lane))
        met, state = await unblocked_state(ctx, batch_id, name)
        if not met and state.get("blocked_on"):
            out.append((name, list(state["blocked_on"])))
    return out


async def blocked_claim_warnings(ctx: Ctx, batch_id: str, repo: str, target: str,
                                 agent_id: str) -> list[str]:
    """What a claim on a blocked lane warns (it still succeeds): the lane and the refs
    it waits for. A read that fails is no reason to warn, nor to fail the claim."""
    try:
        blocked = await blocked_lanes_of_target(ctx, batch_id, repo, target, agent_id)
    except (CoordError, OSError):
        return []
    return [f"lane {batch_id}:{lane} is blocked on {', '.join(refs)} (not done)"
            for lane, refs in blocked]


async def wait_until_unblocked(ctx: Ctx, batch_id: str, lane: str, *, poll_seconds: float = 1.0,
                               timeout: float | None = None, sleep: Any = None) -> dict[str, Any]:
    """`wait --until-unblocked`: exit_code 0 once unblocked, 2 with timed_out after `timeout`."""
    return await poll_until(lambda: unblocked_state(ctx, batch_id, lane),
                            poll_seconds=poll_seconds, timeout=timeout, sleep=sleep,
                            batch=(ctx, batch_id))
