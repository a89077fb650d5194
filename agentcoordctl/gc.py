"""gc: retention (dry-run plan or execute), with progress on stderr."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from agentcoordctl.options import (
    ApiUrl, EtcdEndpoints, Json, LegacyBackend, StateRoot, fail, run, selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("gc")(gc)


def _text(payload: Any) -> str:
    actions = payload.get("actions") or []
    lines = [f"gc {payload.get('mode')}: {len(actions)} action(s)"]
    for action in actions:
        source = action.get("source_path") or ", ".join(action.get("source_paths") or [])
        lines.append(f"- {action.get('action')} {source} -> {action.get('archive_path') or '-'} "
                     f"({action.get('reason')})")
    return "\n".join(lines)


def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Archive, compact and expire.")] = False,
    json: Json = False,
    hot_days: Annotated[Optional[int], typer.Option("--hot-days", metavar="DAYS")] = None,
    archive_days: Annotated[Optional[int], typer.Option("--archive-days", metavar="DAYS")] = None,
    synthetic_hot_days: Annotated[Optional[int], typer.Option("--synthetic-hot-days",
                                                              metavar="DAYS")] = None,
    prefix: Annotated[Optional[list[str]], typer.Option(
        "--prefix", metavar="claims|heartbeats|batches|events",
        help="Restrict hot-family scans (repeatable).")] = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Apply the retention plan: exactly one of --dry-run or --execute."""
    if dry_run == execute:
        raise fail("gc requires exactly one of --dry-run or --execute", p.EXIT_USAGE)
    run(p.Gc(execute=execute, hot_days=hot_days, archive_days=archive_days,
             synthetic_hot_days=synthetic_hot_days, prefixes=list(prefix or []),
             selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=_text)
