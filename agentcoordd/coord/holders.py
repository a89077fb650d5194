"""Who holds each lane, told from that lane's own claim (the operator's view).

A lane's lease is the claim of its first target (`claim --next` claims it). Its
row keeps agent-coord's `status` and `liveness` (derived from the lane owner's
heartbeat, whatever that heartbeat is about) and adds:

* `lane_state` — `closed` (a declared terminal, in `closed_as`: the manifest
  stamp, a terminal planned status, a claim released with one, or the owner's
  heartbeat about this lane saying one; no liveness alarm), `held`,
  `stale_holder`, `dead_holder` (an active claim judged by the lease rules of
  coord/lease.py: the holder's heartbeat, one older than the claim counting as
  none, the claim's expiry as the fallback), `blocked` (nobody holds it and a
  dependency is unmet), `released` (a claim released without closing the lane:
  the next agent may take it), `not_started` (never claimed);
* `holder` — the claim's agent, since when (`claimed_at`), its liveness under
  the lease rules and their detail, the grant's fencing token, and the status
  and phase of its heartbeat only when that heartbeat is about this lane's
  target (a heartbeat about another lane says nothing of this one).

A lane worked without a claim (agent-coord's heartbeat-only habit) is `held` by
its owner while the owner's heartbeat is about the lane's target.

Pool lanes (`"pool": true`: the owner only names the pool and never
heartbeats) take `status` and `liveness` from their holder
(docs/compat.md#lane-holders).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from agentcoordd.coord import lease
from agentcoordd.model.status import is_terminal

CLOSED, HELD, STALE_HOLDER, DEAD_HOLDER = "closed", "held", "stale_holder", "dead_holder"
BLOCKED, RELEASED, NOT_STARTED = "blocked", "released", "not_started"
UNKNOWN_STATE = "unknown"  # the lease's claim could not be read: never told free
LANE_STATES = (CLOSED, HELD, STALE_HOLDER, DEAD_HOLDER, BLOCKED, RELEASED, NOT_STARTED, UNKNOWN_STATE)
# In a claims map: the claim exists but cannot be read (not JSON, not an object, no holder).
UNREADABLE = "unreadable"
# A holder an operator should look at (health's stale_holder/dead_holder signals).
TROUBLED = (STALE_HOLDER, DEAD_HOLDER)


@dataclass(frozen=True)
class LeaseClaim:
    """What the lease rules and a lane row read of a claim record."""

    agent_id: str
    status: str
    claimed_at: Any
    expires_at: Any
    terminal: Any = None
    fencing_token: Any = None

    @classmethod
    def of(cls, data: Any) -> LeaseClaim | str:
        """The claim, or UNREADABLE."""
        if not isinstance(data, dict) or not isinstance(data.get("agent_id"), str):
            return UNREADABLE
        return cls(data["agent_id"], str(data.get("status")), data.get("claimed_at"),
                   data.get("expires_at"), data.get("terminal"), data.get("fencing_token"))


def lease_target(repo: Any, targets: list[str]) -> tuple[str, str] | None:
    """(repo, target) of a lane's lease: its first target in the batch's repo."""
    if not isinstance(repo, str) or not targets:
        return None
    return repo, str(targets[0])


def is_pool(lane: dict[str, Any]) -> bool:
    return lane.get("pool") is True


def _about(beat: Any, where: tuple[str, str] | None) -> bool:
    """Whether a heartbeat view says what its agent does on this lane's target."""
    return where is not None and hasattr(beat, "is_about") and beat.is_about(*where)


def lane_view(lane: dict[str, Any], *, blocked_on: list[str], where: tuple[str, str] | None,
              claim: LeaseClaim | str | None, beat: Any, owner_beat: Any,
              now: dt.datetime) -> dict[str, Any]:
    """`lane_state` and `holder` of a lane. `lane` is the manifest's lane; `claim` its
    lease's claim (None: there is none; UNREADABLE); `beat` the holder's heartbeat view
    (or a marker when it has none); `owner_beat` the lane owner's."""
    terminal = lane.get("terminal")
    if terminal is None and is_terminal(lane.get("status")):
        terminal = lane.get("status")
    if terminal is None and isinstance(claim, LeaseClaim) and claim.status != "active":
        terminal = claim.terminal
    if terminal is None and _about(owner_beat, where) and is_terminal(owner_beat.status):
        terminal = owner_beat.status
    if terminal is not None:
        return {"lane_state": CLOSED, "closed_as": terminal}
    if claim == UNREADABLE:
        return {"lane_state": UNKNOWN_STATE}
    if isinstance(claim, LeaseClaim) and claim.status == "active":
        return _held(claim, beat if hasattr(beat, "updated_at") else None, where, now)
    if _about(owner_beat, where) and owner_beat.liveness(now) != "dead":
        holder = {"agent_id": owner_beat.agent_id, "since": None,
                  "liveness": owner_beat.liveness(now),
                  "detail": "no claim: the owner's heartbeat is about this lane"}
        return {"lane_state": HELD if holder["liveness"] == "live" else STALE_HOLDER,
                "holder": {**holder, **_doing(owner_beat)}}
    if blocked_on:
        return {"lane_state": BLOCKED}
    return {"lane_state": RELEASED if claim is not None else NOT_STARTED}


def _held(claim: LeaseClaim, beat: Any, where: tuple[str, str] | None,
          now: dt.datetime) -> dict[str, Any]:
    verdict = lease.judge(claim, beat, None if beat is not None else "missing", now)
    holder: dict[str, Any] = {"agent_id": claim.agent_id, "since": claim.claimed_at,
                              "liveness": verdict.liveness, "detail": verdict.detail}
    if claim.fencing_token is not None:
        holder["fencing_token"] = claim.fencing_token
    if _about(beat, where):
        holder.update(_doing(beat))
    state = DEAD_HOLDER if verdict.takeable else STALE_HOLDER if verdict.liveness == "stale" else HELD
    return {"lane_state": state, "holder": holder}


def _doing(beat: Any) -> dict[str, Any]:
    out = {"status": beat.status, "updated_at": beat.updated_at}
    if beat.meta.get("phase") is not None:
        out["phase"] = beat.meta["phase"]
    return out


def pool_fields(lane: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """A pool lane's `status`/`liveness` from its holder (the owner only names the pool)."""
    holder = view.get("holder")
    if not is_pool(lane) or view["lane_state"] == CLOSED or holder is None:
        return {}
    return {"status": holder.get("status", lane.get("status", "unknown")),
            "liveness": holder["liveness"]}
