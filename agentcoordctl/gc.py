"""gc: retention (dry-run plan or execute), with progress on stderr."""

from __future__ import annotations

from typing import Any

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import spec
from agentcoordctl.options import BACKEND, JSON, fail, run
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


def _text(payload: Any) -> str:
    """agent-coord's lines: the mode and policy, then one line per action (sources
    comma-separated, no arrow without an archive path), or `- no actions`."""
    actions = payload.get("actions") or []
    policy = payload.get("policy") or {}
    lines = [f"gc {payload.get('mode')} hot={policy.get('hot_days')}d "
             f"archive={policy.get('archive_days')}d synthetic_hot={policy.get('synthetic_hot_days')}d"]
    for action in actions:
        source = action.get("source_path") or ",".join(action.get("source_paths") or [])
        archive = f" -> {action['archive_path']}" if action.get("archive_path") else ""
        lines.append(f"- {action.get('action')} {source}{archive} ({action.get('reason')})")
    if not actions:
        lines.append("- no actions")
    return "\n".join(lines)


def gc(*, dry_run: bool, execute: bool, json: bool, hot_days: int | None,
       archive_days: int | None, synthetic_hot_days: int | None, prefix: list[str] | None,
       selection: p.Selection) -> None:
    if dry_run == execute:
        raise fail("gc requires exactly one of --dry-run or --execute", p.EXIT_USAGE)
    run(p.Gc(execute=execute, hot_days=hot_days, archive_days=archive_days,
             synthetic_hot_days=synthetic_hot_days, prefixes=list(prefix or []),
             selection=selection),
        as_json=json, text=_text)


COMMANDS = (spec.Command(
    ("gc",), "Apply the retention plan: exactly one of --dry-run or --execute.",
    (Opt("--dry-run", "dry_run", "flag", help="Print the plan; write nothing."),
     Opt("--execute", "execute", "flag", help="Archive, compact and expire."),
     JSON,
     # Defaults as agentcoordd.coord.gc's (a test keeps them equal).
     Opt("--hot-days", "hot_days", "int", metavar="DAYS", saturate=True,
         help="Days terminal state stays hot before it is archived (default 7)."),
     Opt("--archive-days", "archive_days", "int", metavar="DAYS", saturate=True,
         help="Days archived state is kept before deletion (default 30)."),
     Opt("--synthetic-hot-days", "synthetic_hot_days", "int", metavar="DAYS", saturate=True,
         help="Days synthetic (simulation, smoke) state stays hot (default 1)."),
     Opt("--prefix", "prefix", "many", metavar="claims|heartbeats|batches|events",
         help="Restrict hot-family scans (repeatable)."),
     BACKEND),
    gc, **AGENT_COORD),)
