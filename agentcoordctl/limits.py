"""Host limits: a provider's usage limit on this machine's quota pool (docs/capacity.md).

    limit report --quota-host H --scope S (--resets-at TIME | --reset-unknown) [--source S]
    limit clear --quota-host H --scope S
    limit list [--json]

The record is this machine's (AGENT_COORD_MACHINE_ID). While it is active and its
reset has not passed, ready / claim --next / wait --until-ready on this machine skip
lanes whose manifest entry names that `quota_host`, and reserve refuses them (exit 4).
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import render, spec
from agentcoordctl.capacity import WORKSPACE
from agentcoordctl.options import BACKEND, JSON, run
from agentcoordctl.render import printable
from agentcoordctl.spec import REQUIRED, Opt, Parsed, UsageProblem
from agentcoordd import protocol as p

QUOTA_HOST = Opt("--quota-host", "quota_host", default=REQUIRED, metavar="POOL",
                 help="The quota pool (canonical: lowercase, no scheme or port), e.g. claude-max.")
SCOPE = Opt("--scope", "scope", default=REQUIRED, metavar="SCOPE",
            help="Which limit of the pool, e.g. 5h, daily, weekly.")
RESETS_AT = Opt("--resets-at", "resets_at", metavar="TIME",
                help="When the limit resets (RFC 3339 with a zone); it stops counting then.")
RESET_UNKNOWN = Opt("--reset-unknown", "reset_unknown", "flag",
                    help="The reset time is unknown: the limit counts until `limit clear`.")


def one_reset(parsed: Parsed) -> None:
    known, unknown = parsed.given.get("--resets-at"), parsed.given.get("--reset-unknown")
    if not known and not unknown:
        raise UsageProblem("missing required --resets-at TIME or --reset-unknown")
    if known and unknown:
        raise UsageProblem("needless argument: --reset-unknown (--resets-at gives the reset)")


def render_one(row: dict[str, Any]) -> str:
    return "host limit " + render.host_limit(row).removeprefix("- ")


def render_list(payload: dict[str, Any]) -> str:
    rows = payload.get("host_limits") or []
    if not rows:
        return f"no host limits in workspace {payload.get('workspace')}"
    return "\n".join(render_one(row) for row in rows)


def report(*, quota_host: str, scope: str, resets_at: str | None, reset_unknown: bool,
           source: str, workspace: str, json: bool, selection: p.Selection) -> None:
    run(p.LimitReport(quota_host=quota_host, scope=scope, resets_at=resets_at, source=source,
                      workspace=workspace, selection=selection), as_json=json,
        text=lambda row: printable(render_one(row)))


def clear(*, quota_host: str, scope: str, workspace: str, json: bool,
          selection: p.Selection) -> None:
    run(p.LimitClear(quota_host=quota_host, scope=scope, workspace=workspace,
                     selection=selection), as_json=json, text=lambda row: printable(render_one(row)))


def list_limits(*, workspace: str, json: bool, selection: p.Selection) -> None:
    run(p.LimitList(workspace=workspace, selection=selection), as_json=json, text=render_list)


COMMANDS = (
    spec.Command(("limit", "report"), "Record that this machine hit a usage limit of a quota "
                 "pool: lanes naming that quota_host are skipped here until it resets.",
                 (QUOTA_HOST, SCOPE, RESETS_AT, RESET_UNKNOWN,
                  Opt("--source", "source", default="manual", metavar="SOURCE",
                      help="manual (default) | host-message | hook | probe."),
                  WORKSPACE, JSON, BACKEND), report, checks=(one_reset,)),
    spec.Command(("limit", "clear"), "The limit is over before its reset (or it had none).",
                 (QUOTA_HOST, SCOPE, WORKSPACE, JSON, BACKEND), clear),
    spec.Command(("limit", "list"), "Every host-limit record of the workspace, and whether "
                 "it counts now.", (WORKSPACE, JSON, BACKEND), list_limits),
)
