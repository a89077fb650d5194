"""claim and release."""

from __future__ import annotations

from typing import Any

import msgspec

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import render, spec
from agentcoordctl.lanes import KEEP_ALIVE
from agentcoordctl.options import (
    AGENT_ID, BACKEND, BATCH_ID, BRANCH, JSON, METADATA, REPO, TARGET, TTL, run,
)
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


# The daemon's default (agentcoordd.coord.claims.DEFAULT_CLAIM_TTL; a test keeps them equal).
CLAIM_TTL = msgspec.structs.replace(TTL, help="Lease length (default 14400 = 4 h).")


def claim(*, agent_id: str, repo: str, target: str, batch_id: str | None, branch: str | None,
          ttl: int | None, meta: Any, selection: p.Selection, json: bool,
          keep_alive: p.KeepAlive | None) -> None:
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
            selection: p.Selection, json: bool) -> None:
    run(p.Release(agent_id=agent_id, repo=repo, target=target, branch=branch, meta=meta,
                  handoff_to=handoff_to,
                  handoff_note=handoff_note, terminal=terminal, pr_state=pr_state,
                  evidence_url=evidence_url, workspace=workspace, selection=selection),
        as_json=json, text=render.release)


COMMANDS = (
    spec.Command(
        ("claim",), "Acquire or renew the lease on ISSUE_OR_PR (exit 3 while another holder is "
        "live or stale).",
        (AGENT_ID, REPO, TARGET, BATCH_ID, BRANCH, CLAIM_TTL, METADATA, BACKEND, JSON, KEEP_ALIVE),
        claim, **AGENT_COORD),
    spec.Command(
        ("release",), "Release your claim on ISSUE_OR_PR: plain, structured handoff, or terminal "
        "closeout.",
        (AGENT_ID, REPO, TARGET, BRANCH,
         Opt("--handoff-to", "handoff_to", metavar="ID", help="Structured handoff: the next agent."),
         Opt("--handoff-note", "handoff_note", metavar="TEXT",
             help="Structured handoff: the resume note."),
         *CLOSEOUT, METADATA, BACKEND, JSON),
        release, **AGENT_COORD),
)
