"""Ready work: which lanes of a batch can start now, and `claim --next`.

A lane is *ready* when it is not closed (no declared terminal — manifest stamp or
lane_closed record — and no terminal lane status), every dependency is met (the
one dependency rule, `coord.waits.blocked_refs`), and none of its targets is held
by a live or stale holder (the lease rules, `coord.lease.check_takeover`: a dead
holder's claim can be taken over, so it does not hold the lane). Every other lane
says why: `closed` (its terminal), `blocked` (the refs), `held` (holder, liveness).

Order: lanes with an integer `priority` first, lower first (P0 before P1), then the
rest; manifest order within a priority and among lanes without one.

An agent may take its own lanes (owner = agent) and pool lanes (`"pool": true`).
`claim --next` claims the first lane it may take with the ordinary claim CAS
(`coord.claims.claim`) on the lane's FIRST target (the lane's lease; the other
targets only have to be free); a lost race moves on to the next ready lane. An
agent that already holds a lane of the batch gets that lane back (a retry whose
first reply was lost, a daemon restarted under it): never a second one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentcoordd.coord.batches import lane_name_of, lane_owner_of, lane_targets_of
from agentcoordd.coord.claims import claim
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.host_limits import DEFAULT_WORKSPACE, blocked_by, effective_for
from agentcoordd.coord.lease import check_takeover
from agentcoordd.coord.waits import (
    blocked_refs, declared_terminal, dependency_status, poll_until, read_manifest,
)
from agentcoordd.model import ids
from agentcoordd.model.errors import ClaimRefused, CoordError, OperationalError, UsageError
from agentcoordd.model.foundation.host_limit import canonical_quota_host
from agentcoordd.model.records import Claim, Metadata, load
from agentcoordd.model.status import is_terminal, satisfies_dependency
from agentcoordd.store.base import Forbidden, InvalidRecord

READY, BLOCKED, HELD, CLOSED = "ready", "blocked", "held", "closed"
STATES = (READY, BLOCKED, HELD, CLOSED)


def is_pool(lane: dict[str, Any]) -> bool:
    return lane.get("pool") is True


def priority_of(lane: dict[str, Any]) -> int | None:
    """The lane's integer priority (a bool or any other value is no priority)."""
    value = lane.get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def start_order(lanes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prioritised lanes first (lower number first), then the rest; manifest order within."""
    def key(item: tuple[int, dict[str, Any]]) -> tuple[int, int, int]:
        position, lane = item
        priority = priority_of(lane)
        return (0, priority, position) if priority is not None else (1, 0, position)
    return [lane for _, lane in sorted(enumerate(lanes), key=key)]


async def _holders(ctx: Ctx, repo: str, targets: list[str],
                   dead: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Who holds each target with a live or stale claim (a claim would be refused);
    `dead` collects target -> the holder of an active claim that may be taken over."""
    now = ctx.clock.now()
    out = []
    for target in targets:
        path = ids.claim_path(repo, target)
        try:
            current = await ctx.store.get(path)
            stored = current.data if current is not None else None
            if not isinstance(stored, dict) or stored.get("status") != "active":
                continue
            held = load(Claim, stored, path)
            await check_takeover(ctx, held, repo, target, now)
            if dead is not None:
                dead[target] = held.agent_id
        except ClaimRefused as refused:
            out.append({"target": target, "agent_id": refused.holder, "liveness": refused.liveness})
        except InvalidRecord as exc:  # named, and never assumed free
            ctx.warn(f"lane target {repo}#{target} is held by an unreadable record: {exc.message}")
            out.append({"target": target, "agent_id": "UNKNOWN", "liveness": "unreadable", "path": path})
        except (Forbidden, OperationalError, UsageError):
            # an unreadable claim (or a legacy target no claim can name) is never assumed free
            out.append({"target": target, "agent_id": "UNKNOWN", "liveness": "unreadable"})
    return out


async def _classify(ctx: Ctx, batch_id: str, lane: dict[str, Any], repo: str | None,
                    manifests: dict[str, Any], statuses: dict[tuple[str, str], Any]) -> dict[str, Any]:
    name = lane_name_of(lane) or ""
    row: dict[str, Any] = {"name": name, "owner": lane_owner_of(lane), "pool": is_pool(lane),
                           "priority": priority_of(lane), "targets": lane_targets_of(lane)}
    if isinstance(lane.get("quota_host"), str) and lane["quota_host"]:
        row["quota_host"] = lane["quota_host"]  # only when given: host limits match on it
    status = await dependency_status(ctx, batch_id, lane)
    statuses[(batch_id, name)] = status  # a dependent in this batch reuses it
    if is_terminal(status) or satisfies_dependency(status):
        return {**row, "state": CLOSED, "terminal": status}
    blocked = await blocked_refs(ctx, lane, manifests, statuses)
    if blocked:
        return {**row, "state": BLOCKED, "blocked_on": blocked}
    dead: dict[str, str] = {}
    held = await _holders(ctx, repo, row["targets"], dead) if repo else []
    if held:
        return {**row, "state": HELD, "held_by": held}
    if dead:  # ready: a takeover of these holders (their heartbeats are dead)
        return {**row, "state": READY, "dead_holders": dead}
    return {**row, "state": READY}


# How a caller shares a computed answer with concurrent ones (the daemon's
# `SharedResults.share`): share(key, compute) -> compute()'s value, maybe another's.
Share = Callable[[Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def batch_view(ctx: Ctx, batch_id: str,
                     only: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Every lane of the batch (or those `only` keeps) in start order with its state and
    reason (no agent's view)."""
    manifest = await read_manifest(ctx, batch_id)
    if isinstance(manifest, str):
        raise OperationalError(f"ready: {manifest}")
    repo = manifest.get("repo") if isinstance(manifest.get("repo"), str) else None
    if repo is None:
        ctx.warn(f"batch {batch_id} declares no repo: lane targets were not checked for holders")
    raw = manifest.get("lanes")
    lanes = [lane for lane in (raw if isinstance(raw, list) else [])
             if isinstance(lane, dict) and lane_name_of(lane) is not None
             and (only is None or only(lane))]
    manifests: dict[str, Any] = {batch_id: manifest}
    statuses: dict[tuple[str, str], Any] = {}
    rows = [await _classify(ctx, batch_id, lane, repo, manifests, statuses)
            for lane in start_order(lanes)]
    return {"repo": repo, "rows": rows}


async def ready_lanes(ctx: Ctx, *, batch_id: str, agent_id: str | None = None,
                      share: Share | None = None, takeable_only: bool = False) -> dict[str, Any]:
    """`ready`: every lane of the batch in start order, each with its state and reason;
    `ready` names the ready ones, and with `agent_id` each row says `may_take`.
    `share` lets concurrent callers of one batch share one classification;
    `takeable_only` classifies only the lanes `agent_id` may take (claim --next)."""
    ids.batch_id(batch_id)
    if agent_id is not None:
        ids.agent_id(agent_id)
    if takeable_only and agent_id is not None:
        view = await batch_view(ctx, batch_id,
                                lambda lane: is_pool(lane) or lane_owner_of(lane) == agent_id)
    elif share is None:
        view = await batch_view(ctx, batch_id)
    else:
        view = await share(("ready", batch_id), lambda: batch_view(ctx, batch_id))
    rows = [dict(row) for row in view["rows"]]  # callers update their own copies
    await _host_limited(ctx, rows)
    if agent_id is not None:
        for row in rows:
            row["may_take"] = row["pool"] or row["owner"] == agent_id
    counts = {state: sum(1 for row in rows if row["state"] == state) for state in STATES}
    out: dict[str, Any] = {"batch_id": batch_id, "repo": view["repo"], "agent_id": agent_id,
                           "ready": [row["name"] for row in rows if row["state"] == READY],
                           "counts": counts, "lanes": rows}
    if agent_id is not None:
        out["takeable"] = [row["name"] for row in rows if row["state"] == READY and row["may_take"]]
    return out


async def _host_limited(ctx: Ctx, rows: list[dict[str, Any]]) -> None:
    """A ready lane naming a `quota_host` that an effective host limit of the caller's
    machine covers is blocked on that limit (which record, until when) — per caller, after
    any shared classification, since the machine is the caller's. Re-read on every call,
    so a waiter wakes once the reset passes."""
    candidates = [row for row in rows if row["state"] == READY and row.get("quota_host")]
    if not candidates:
        return
    # A lane's `workspace` is its closeout's checkout, not a tenant: batches live in the
    # self-hosted workspace.
    try:
        limits = await effective_for(ctx.store, DEFAULT_WORKSPACE, ctx.identity.machine_id,
                                     ctx.clock.now())
    except Forbidden:  # a machine token without host_limits in its read scopes
        ctx.warn("host limits are outside this machine's read scopes: lanes naming a "
                 "quota_host were not checked against them")
        return
    for row in candidates:
        limit = limits.get(canonical_quota_host(row["quota_host"]))
        if limit is not None:
            row.update(state=BLOCKED, blocked_on=[f"host-limit:{limit.quota_host}/{limit.scope}"],
                       blocked_on_limit=blocked_by(limit))
            row.pop("dead_holders", None)


def _refusal(batch_id: str, rows: list[dict[str, Any]]) -> ClaimRefused:
    count = {state: sum(1 for row in rows if row["state"] == state) for state in STATES}
    limited = [row["blocked_on_limit"] for row in rows if row.get("blocked_on_limit")]
    why = ""
    if limited:
        first = limited[0]
        until = first["resets_at"] or "cleared (reset unknown)"
        why = (f"; {len(limited)} on host limit {first['quota_host']}/{first['scope']} "
               f"of {first['machine']} until {until}")
    return ClaimRefused(
        f"CLAIM_REFUSED: no ready lane in batch {batch_id} ({count[BLOCKED]} blocked, "
        f"{count[HELD]} held, {count[CLOSED]} closed{why})", holder="", liveness="")


async def claim_next(ctx: Ctx, *, batch_id: str, agent_id: str, branch: str | None = None,
                     ttl: int | None = None, meta: Metadata = Metadata(),
                     survey: Ctx | None = None, share: Share | None = None) -> dict[str, Any]:
    """`claim --next`: the claim of the first ready lane this agent may take, plus `lane`.
    Nothing ready: ClaimRefused counting this agent's lanes (own and pool) by state.

    The candidates may first come from `survey`/`share`: reads and a classification that
    concurrent callers share for a moment (the daemon's). A lane it shows free that is
    not is a lost race, and dependencies only ever become met, so a slightly old view
    never hands out a blocked lane. It can miss a lane that just became ready (the
    caller's own closeout a moment ago unblocked it), so a refusal is only ever given
    after a classification that read `ctx.store` itself. The claim, and the checks that
    the lane was not closed meanwhile, always read `ctx.store`.

    Idempotent: a lane of the batch this agent already holds (an active claim on its
    first target) is renewed and returned with `already_held`, before any other lane."""
    ids.agent_id(agent_id)
    if survey is not None or share is not None:
        view = await ready_lanes(survey or ctx, batch_id=batch_id, agent_id=agent_id, share=share)
        if survey is not None:
            ctx.warnings.extend(survey.warnings)
            survey.warnings.clear()
        taken = await _take_first(ctx, view, batch_id, agent_id, branch, ttl, meta)
        if taken is not None:
            return taken
    view = await ready_lanes(ctx, batch_id=batch_id, agent_id=agent_id, takeable_only=True)
    taken = await _take_first(ctx, view, batch_id, agent_id, branch, ttl, meta)
    if taken is not None:
        return taken
    raise _refusal(batch_id, [row for row in view["lanes"] if row["may_take"]])


def _holder_of_first_target(row: dict[str, Any]) -> str | None:
    """Who holds the lane's lease (its first target) as the view saw it: a live or stale
    holder, or a dead one that may be taken over."""
    target = row["targets"][0]
    for held in row.get("held_by") or ():
        if held.get("target") == target:
            return held.get("agent_id")
    return (row.get("dead_holders") or {}).get(target)


async def _take_first(ctx: Ctx, view: dict[str, Any], batch_id: str, agent_id: str,
                      branch: str | None, ttl: int | None, meta: Metadata) -> dict[str, Any] | None:
    """Claim the lane this agent already holds, else the first ready lane of `view` it may
    take; None when every one was lost (its rows then say why)."""
    repo = view["repo"]
    if repo is None:
        raise UsageError(f"batch {batch_id} declares no repo: claim --next cannot name a claim "
                         "(use claim --repo --target)")
    rows = [row for row in view["lanes"] if row["may_take"] and row["targets"]
            and row["state"] in (READY, HELD)]
    mine = [row for row in rows if _holder_of_first_target(row) == agent_id]
    for row in [*mine, *(row for row in rows if row["state"] == READY and row not in mine)]:
        target = row["targets"][0]
        closed = await declared_terminal(ctx, batch_id, {"name": row["name"]})
        if closed is not None:  # closed since the survey (its claim is released: claimable)
            row.update(state=CLOSED, terminal=closed)
            continue
        name = row["name"]

        async def still_open(name: str = name) -> bool:
            return await declared_terminal(ctx, batch_id, {"name": name}) is None

        try:
            result = await claim(ctx, agent_id=agent_id, repo=repo, target=target, batch_id=batch_id,
                                 branch=branch, ttl=ttl, meta=meta, lane_name=name,
                                 surveyed_holder=_holder_of_first_target(row),
                                 still_open=still_open, ensure_acquired=True)
        except ClaimRefused as refused:  # lost the race for this lane: the next one
            if refused.liveness == "closed":
                row.update(state=CLOSED, terminal=await declared_terminal(ctx, batch_id, {"name": name}))
            else:
                row.update(state=HELD, held_by=[{"target": target, "agent_id": refused.holder,
                                                 "liveness": refused.liveness}])
            continue
        taken = {**result, "lane": row["name"], "repo": repo, "target": target, "batch_id": batch_id}
        if result["action"] == "renewed":
            taken["already_held"] = True
            ctx.warn(f"{agent_id} already holds lane {name} of {batch_id} ({repo}#{target}): "
                     "claim --next gives it back; release it (or close it) to take another")
        return taken
    return None


async def ready_state(ctx: Ctx, batch_id: str, agent_id: str | None,
                      share: Share | None = None) -> tuple[bool, dict[str, Any]]:
    """(met, state) for `wait --until-ready`: some lane is ready (one this agent may take,
    given one) — or none will ever be: every such lane is closed (`closed: true`), so the
    caller's next `claim --next` gives its final refusal instead of waiting for nothing."""
    ids.batch_id(batch_id)
    state: dict[str, Any] = {"batch_id": batch_id, "agent_id": agent_id}
    try:
        view = await ready_lanes(ctx, batch_id=batch_id, agent_id=agent_id, share=share)
    except UsageError:
        raise
    except CoordError as exc:  # an unregistered batch may be registered yet: keep waiting
        return False, {**state, "detail": exc.message.removeprefix("ready: ")}
    rows = [row for row in view["lanes"] if agent_id is None or row["may_take"]]
    counts = {name: sum(1 for row in rows if row["state"] == name) for name in STATES}
    names = [row["name"] for row in rows if row["state"] == READY]
    state.update(ready=names, counts=counts)
    who = f" for {agent_id}" if agent_id is not None else ""
    if names:
        return True, {**state, "lane": names[0],
                      "detail": f"lane {names[0]} of {batch_id} is ready{who}"}
    if counts[BLOCKED] == counts[HELD] == 0:
        return True, {**state, "lane": None, "closed": True, "detail": (
            f"no lane of {batch_id} is left open{who} ({counts[CLOSED]} closed): nothing to wait for")}
    limited = [row["blocked_on_limit"] for row in rows if row.get("blocked_on_limit")]
    on_limit = ""
    if limited:
        resets = sorted(limit["resets_at"] or "cleared" for limit in limited)
        on_limit = f"; {len(limited)} on a host limit, first reset {resets[0]}"
    return False, {**state, "detail": (
        f"no lane of {batch_id} ready{who} ({counts[BLOCKED]} blocked, {counts[HELD]} held, "
        f"{counts[CLOSED]} closed{on_limit})")}


async def wait_until_ready(ctx: Ctx, batch_id: str, agent_id: str | None = None, *,
                           poll_seconds: float = 1.0, timeout: float | None = None,
                           sleep: Any = None, share: Share | None = None) -> dict[str, Any]:
    """`wait --until-ready`: exit_code 0 once a lane is ready, 2 with timed_out after `timeout`."""
    return await poll_until(lambda: ready_state(ctx, batch_id, agent_id, share),
                            poll_seconds=poll_seconds, timeout=timeout, sleep=sleep,
                            batch=(ctx, batch_id))
