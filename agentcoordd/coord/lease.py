"""The lease rules: whether a claim's holder may be displaced, and on which evidence.

`claim` (acquire, renew, take over), `claim --next` and `ready` (coord/ready.py),
the forced takeover and the `lease` verdict of `status --target` (what
`wait --until-free` waits for) all call this module; none re-derives a rule.

* The holder's heartbeat decides (spec, "Heartbeat Liveness"): live or stale
  refuses, dead allows a takeover; without a usable heartbeat the claim's own
  `expires_at` is the fallback.
* **Fresh claims are protected.** Heartbeats are per agent, claims per target:
  a dead heartbeat written before the claim was acquired (`updated_at` earlier
  than the claim's `claimed_at`) says nothing about the holder since, so it
  counts as missing and the claim's expiry is the fallback
  (docs/compat.md#fresh-claims). A live or stale one still refuses.
* **The backend's clock decides.** A takeover is granted only while this
  machine's clock is within `max_clock_offset` of the backend's, as measured
  from its responses (store/clockref.py); beyond it the decision would be a
  guess, so it is UNKNOWN (exit 2).
* **Leases are bounded**: a claim or heartbeat TTL above `max_ttl` is refused.
* **Every grant has a fencing token** (`fencing_token` in the claim): greater than
  the token of every earlier grant of the target, kept by the same holder's
  renewals and by a release (docs/backends.md#fencing-tokens).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

from agentcoordd.coord.context import Ctx, LeasePolicy
from agentcoordd.model.clockskew import Offset
from agentcoordd.model import ids
from agentcoordd.model.errors import ClaimRefused, OperationalError, UsageError
from agentcoordd.model.liveness import liveness
from agentcoordd.model.records import Claim, Heartbeat, try_load
from agentcoordd.model.timefmt import new_event_id, parse_ts
from agentcoordd.store.base import InvalidRecord

# Why a takeover happened (the `takeover_reason` of the claim and its claim.acquired event).
HEARTBEAT_DEAD = "heartbeat_dead"
CLAIM_EXPIRED = "claim_expired"
FORCED = "forced"
REASON_TEXT = {HEARTBEAT_DEAD: "the holder's heartbeat is dead",
               CLAIM_EXPIRED: "the claim expired without a usable heartbeat",
               FORCED: "forced by an operator"}
# A dead heartbeat older than the claim it would judge (the ready/refusal `liveness` word).
PREDATES_CLAIM = "predates_claim"


@dataclass(frozen=True)
class Verdict:
    """What the lease rules say of an active claim's holder right now."""

    holder: str
    liveness: str  # live | stale | dead | missing | invalid | predates_claim
    takeover: str | None  # HEARTBEAT_DEAD / CLAIM_EXPIRED when the claim may be taken over
    detail: str  # "heartbeat live", "heartbeat missing; fallback claim expires at …"

    @property
    def takeable(self) -> bool:
        return self.takeover is not None


def judge(held: Claim, beat: Heartbeat | None, beat_problem: str | None,
          now: dt.datetime) -> Verdict:
    """The rule itself, pure. `beat_problem`: "missing" or "invalid" when there is no
    usable heartbeat (then `beat` is None)."""
    state = liveness(beat.updated_at, beat.expires_at, now) if beat is not None else "unknown"
    if state in ("live", "stale"):
        return Verdict(held.agent_id, state, None, f"heartbeat {state}")
    claimed = parse_ts(held.claimed_at)
    beat_time = parse_ts(beat.updated_at) if beat is not None else None
    if state == "dead" and claimed is not None and beat_time is not None and beat_time >= claimed:
        return Verdict(held.agent_id, "dead", HEARTBEAT_DEAD, "heartbeat dead")
    # No evidence about the holder since the claim: the claim's own expiry decides.
    if state == "dead":
        reason = PREDATES_CLAIM
    elif beat_problem is not None:
        reason = beat_problem
    else:
        reason = "invalid"  # a heartbeat whose timestamps do not parse
    expires = parse_ts(held.expires_at)
    fallback = "heartbeat predates the claim" if reason == PREDATES_CLAIM else f"heartbeat {reason}"
    detail = f"{fallback}; fallback claim expires at {held.expires_at}"
    # An unreadable expiry refuses (docs/compat.md#unreadable-claim-expiry).
    if expires is None or now < expires:
        return Verdict(held.agent_id, reason, None, detail)
    return Verdict(held.agent_id, reason, CLAIM_EXPIRED, detail)


async def holder_verdict(ctx: Ctx, held: Claim, now: dt.datetime) -> Verdict:
    """Read the holder's heartbeat and judge."""
    beat: Heartbeat | None = None
    problem: str | None = None
    try:
        stored = await ctx.store.get(ids.heartbeat_path(held.agent_id))
    except UsageError:
        stored, problem = None, "missing"  # a legacy holder id that is not a valid path segment
    except InvalidRecord:
        stored, problem = None, "invalid"  # not JSON: an invalid heartbeat, not a backend failure
    if stored is None:
        problem = problem or "missing"
    else:
        beat = try_load(Heartbeat, stored.data)
        if beat is None:
            problem = "invalid"
    return judge(held, beat, problem, now)


async def check_takeover(ctx: Ctx, held: Claim, repo: str, target: str,
                         now: dt.datetime) -> Verdict:
    """The verdict when the holder may be taken over; ClaimRefused otherwise."""
    verdict = await holder_verdict(ctx, held, now)
    if not verdict.takeable:
        raise ClaimRefused(
            f"CLAIM_REFUSED: active claim for {repo}#{target} held by {held.agent_id}; "
            f"{verdict.detail}", holder=held.agent_id, liveness=verdict.liveness)
    return verdict


async def check_clock(ctx: Ctx, decision: str) -> None:
    """Refuse (exit 2) a liveness decision while this machine's clock is further from the
    backend's than the policy allows. A local root is this machine's clock; a backend
    that gives no time (an old Worker behind a proxy without `Date`) cannot be checked."""
    reference = ctx.store.capabilities.clock
    if reference is None:
        return
    offset = await reference.measured()
    bound = ctx.lease.max_clock_offset
    if offset is not None and offset.certainly_beyond(bound):
        raise OperationalError(
            f"{decision} refused: this machine's clock is {_apart(offset)} the backend's (bound "
            f"{bound:g}s), so its judgement of liveness would be a guess; coordination state "
            "is UNKNOWN. Fix the clock (NTP) or raise max_clock_offset "
            "(agentcoordctl docs backends, \"Clocks\")")


def _apart(offset: Offset) -> str:
    return f"{abs(offset.seconds):.1f}s {'ahead of' if offset.seconds >= 0 else 'behind'}"


def clock_report(offset: Offset | None, bound: float) -> dict[str, Any]:
    """A backend's clock as doctor, health and `daemon status` show it."""
    if offset is None:
        return {"status": "unknown", "offset_seconds": None, "uncertainty_seconds": None,
                "bound_seconds": bound,
                "summary": "the backend's responses carry no time: its clock cannot be compared"}
    beyond = offset.certainly_beyond(bound)
    return {"status": "beyond_bound" if beyond else "ok",
            "offset_seconds": round(offset.seconds, 3),
            "uncertainty_seconds": round(offset.uncertainty, 3), "bound_seconds": bound,
            "summary": (f"this machine's clock is {_apart(offset)} the backend's "
                        f"(±{offset.uncertainty:.1f}s, bound {bound:g}s)"
                        + ("; takeovers are refused until it is fixed (NTP)" if beyond else ""))}


def grant_token(ctx: Ctx, stored: Any, now: dt.datetime) -> int:
    """The fencing token of a new grant of a target: above the token the claim record
    carries (a release keeps it), and not below the backend's time in microseconds
    (this clock corrected by its measured offset), which is above any token of a record
    gc deleted days before: its tokens came from its own grants' times
    (docs/backends.md#fencing-tokens)."""
    previous = stored.get("fencing_token") if isinstance(stored, dict) else None
    reference = ctx.store.capabilities.clock
    offset = reference.offset() if reference is not None else None
    floor = int((now.timestamp() - (offset.seconds if offset is not None else 0.0)) * 1_000_000)
    if isinstance(previous, int) and not isinstance(previous, bool) and previous >= floor:
        return previous + 1
    return floor


def fence_verdict(stored: Any, repo: str, target: str, token: int) -> dict[str, Any]:
    """Is `token` the current grant of the claim record `stored`? `state` current |
    superseded | unknown (an active claim without a token), with the claim's holder,
    token and status."""
    stored = stored if isinstance(stored, dict) else None
    held = stored.get("fencing_token") if stored is not None else None
    out: dict[str, Any] = {"repo": repo, "target": target, "token": token,
                           "holder": stored.get("agent_id") if stored else None,
                           "current_token": held if isinstance(held, int) else None,
                           "claim_status": stored.get("status") if stored else None}
    active = stored is not None and stored.get("status") == "active"
    if active and held == token and not isinstance(held, bool):
        return {**out, "state": "current", "detail": f"fencing token {token} holds {repo}#{target}"}
    if active and out["current_token"] is None:  # agent-coord renewed or took it: no token kept
        return {**out, "state": "unknown",
                "detail": f"fencing token {token} of {repo}#{target}: the claim (held by "
                          f"{out['holder']}) carries no fencing token, written by a tool that "
                          "does not keep one; UNKNOWN until its holder claims through agentcoord"}
    if stored is None:
        why = "the target has no claim"
    elif not active:
        why = f"the claim was released by {out['holder']}"
    else:
        why = f"{repo}#{target} is held by {out['holder']} with token {out['current_token']}"
    return {**out, "state": "superseded",
            "detail": f"FENCED: fencing token {token} of {repo}#{target} is superseded: {why}"}


async def fence_state(ctx: Ctx, repo: str, target: str, token: int) -> dict[str, Any]:
    """fence_verdict of the claim as stored now; a claim that cannot be read is a
    StoreError (UNKNOWN, exit 2)."""
    current = await ctx.store.get(ids.claim_path(repo, target))
    return fence_verdict(current.data if current is not None else None, repo, target, token)


def fenced(verdict: dict[str, Any]) -> ClaimRefused:
    return ClaimRefused(verdict["detail"], holder=verdict["holder"] or "", liveness="fenced")


async def check_fencing_token(ctx: Ctx, repo: str | None, target: str | None,
                              token: int | None) -> None:
    """A write that names its grant (`--fencing-token N`): refused (exit 3, nothing written)
    unless N is the target's current token."""
    if token is None:
        return
    if not (repo and target):
        raise UsageError("--fencing-token needs --repo and --target (the grant it names)")
    verdict = await fence_state(ctx, repo, target, token)
    if verdict["state"] == "unknown":
        raise OperationalError(verdict["detail"])
    if verdict["state"] != "current":
        raise fenced(verdict)


def grant_event_id(claim: dict[str, Any]) -> str | None:
    """The id of a grant's claim.acquired: the same for every call that looks at this grant
    (a retry whose first reply was lost writes it create-only, so it exists once). Its time
    is the token's (a grant's token is its time in microseconds, unless a clock stepped
    back), so ids sort as freshly drawn ones would."""
    token = claim.get("fencing_token")
    if not isinstance(token, int) or isinstance(token, bool) or token <= 0:
        return None
    try:
        moment = dt.datetime.fromtimestamp(token / 1_000_000, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    digest = hashlib.sha256(f"{claim.get('repo')}#{claim.get('target')}|{token}|"
                            f"{claim.get('generation')}|{claim.get('instance_id')}".encode()).hexdigest()
    return new_event_id(moment, digest[:8])


def bounded_ttl(ttl: int | None, default: int, policy: LeasePolicy, *, flag: str = "--ttl") -> int:
    """A TTL the caller gave (or the default): positive and at most the policy's maximum."""
    if ttl is None:
        return default
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise UsageError(f"{flag} must be positive (seconds): {ttl}")
    if ttl > policy.max_ttl:
        given = f" {ttl}" if ttl < 2**53 else ""  # ctl saturates a huger number to 2**53
        raise UsageError(
            f"{flag}{given} is longer than this machine's maximum lease of {policy.max_ttl}s "
            f"(max_claim_ttl in agentcoordd.toml or AGENT_COORD_MAX_CLAIM_TTL; "
            "agentcoordctl docs keepalive, \"Bounds\")")
    return ttl
