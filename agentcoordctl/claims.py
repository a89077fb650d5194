"""claim and release."""

from __future__ import annotations

from typing import Any

import msgspec

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl.fence import FENCING_TOKEN
from agentcoordctl import render, spec
from agentcoordctl.lanes import KEEP_ALIVE
from agentcoordctl.options import (
    AGENT_ID, BACKEND, BATCH_ID, BRANCH, JSON, METADATA, REPO, TARGET, TTL, run,
)
from agentcoordctl.spec import Opt, Parsed, UsageProblem
from agentcoordd import protocol as p


# The daemon's default (agentcoordd.coord.claims.DEFAULT_CLAIM_TTL; a test keeps them equal).
CLAIM_TTL = msgspec.structs.replace(TTL, help="Lease length (default 14400 = 4 h).")


# claim --next picks the lane (agentcoordctl/ready.py): --repo/--target are required
# only without it, a check that keeps the order of "missing required" refusals.
NEXT = Opt("--next", "next_lane", "flag",
           help="Claim the first ready lane of --batch-id you may take (own and pool lanes) "
           "instead of --repo/--target; none ready: exit 3.")
CLAIM_REPO = msgspec.structs.replace(REPO, default=None, help="Target repository (not with --next).")
CLAIM_TARGET = msgspec.structs.replace(TARGET, default=None, help="Issue or PR (not with --next).")


def next_or_target(parsed: Parsed) -> None:
    given = parsed.given
    lane_pick = bool(given.get("--next"))
    for opt in parsed.command.options():
        needed = opt.required or (opt in (CLAIM_REPO, CLAIM_TARGET) and not lane_pick)
        if needed and given.get(opt.name) in (None, ""):
            raise UsageProblem(f"missing required {opt.name}")
    if lane_pick:
        if "--repo" in given or "--target" in given:
            raise UsageProblem("claim --next picks the lane: drop --repo/--target")
        if given.get("--batch-id") in (None, ""):
            raise UsageProblem("missing required --batch-id (claim --next)")


def claim(*, agent_id: str, repo: str, target: str, batch_id: str | None, branch: str | None,
          ttl: int | None, meta: Any, selection: p.Selection, json: bool,
          keep_alive: p.KeepAlive | None, next_lane: bool = False) -> None:
    if next_lane:
        from agentcoordctl.ready import claim_next

        claim_next(agent_id=agent_id, batch_id=str(batch_id), branch=branch, ttl=ttl, meta=meta,
                   selection=selection, json=json, keep_alive=keep_alive)
        return
    run(p.Claim(agent_id=agent_id, repo=repo, target=target, batch_id=batch_id, branch=branch,
                ttl=ttl, meta=meta, keep_alive=keep_alive, selection=selection),
        as_json=json, text=render.claim)


TERMINAL = Opt("--terminal", "terminal", metavar="done|abandoned|superseded",
               help="Close the lane: write a lane_closed event, then release.")
PR_STATE = Opt("--pr-state", "pr_state", metavar="STATE", help="Final pull-request state.")
EVIDENCE_URL = Opt("--evidence-url", "evidence_url", metavar="URL",
                   help="Replayable closeout evidence.")
WORKSPACE = Opt("--workspace", "workspace", metavar="WORKSPACE",
                help="Workspace of the lane (default: default).")
CLOSEOUT = (TERMINAL, PR_STATE, EVIDENCE_URL, WORKSPACE)


def release(*, agent_id: str, repo: str, target: str, branch: str | None, handoff_to: str | None,
            handoff_note: str | None, terminal: str | None, pr_state: str | None,
            evidence_url: str | None, workspace: str | None, meta: Any,
            selection: p.Selection, json: bool, fencing_token: int | None = None,
            force: bool = False) -> None:
    run(p.Release(agent_id=agent_id, repo=repo, target=target, branch=branch, meta=meta,
                  handoff_to=handoff_to,
                  handoff_note=handoff_note, terminal=terminal, pr_state=pr_state,
                  evidence_url=evidence_url, workspace=workspace, selection=selection,
                  fencing_token=fencing_token, force=force),
        as_json=json, text=render.release)


FORCE = Opt("--force", "force", "flag",
            help="Act for an agent of another machine or session (recorded as forced_by in "
            "the event: uid, pid, machine; agentcoordctl docs security).")


COMMANDS = (
    spec.Command(
        ("claim",), "Acquire or renew the lease on ISSUE_OR_PR (exit 3 while another holder is "
        "live or stale); --next: the first ready lane of --batch-id.",
        (AGENT_ID, CLAIM_REPO, CLAIM_TARGET, BATCH_ID, BRANCH, CLAIM_TTL, METADATA, BACKEND, JSON,
         KEEP_ALIVE, NEXT),
        claim, **{**AGENT_COORD, "checks": (*AGENT_COORD["checks"], next_or_target)}),
    spec.Command(
        ("release",), "Release your claim on ISSUE_OR_PR: plain, structured handoff, or terminal "
        "closeout.",
        (AGENT_ID, REPO, TARGET, BRANCH,
         Opt("--handoff-to", "handoff_to", metavar="ID", help="Structured handoff: the next agent."),
         Opt("--handoff-note", "handoff_note", metavar="TEXT",
             help="Structured handoff: the resume note."),
         *CLOSEOUT, METADATA, BACKEND, JSON, FENCING_TOKEN, FORCE),
        release, **AGENT_COORD),
)
