"""status: full, target-scoped or batch-scoped."""

from __future__ import annotations

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import render, spec
from agentcoordctl.options import BACKEND, BATCH_ID, JSON, OPT_REPO, OPT_TARGET, run, seconds_at_least
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


def status(*, repo: str | None, target: str | None, batch_id: str | None, json: bool,
           include_archived: bool, events: int | None, all_events: bool, watch: bool,
           interval: float, selection: p.Selection) -> None:
    if watch:  # agentcoordctl/watch.py
        from agentcoordctl import watch as live

        live.run(selection=selection, interval=interval, batch_id=batch_id, repo=repo,
                 target=target, as_json=json)
    run(p.Status(repo=repo, target=target, batch_id=batch_id, include_archived=include_archived,
                 events=events, all_events=all_events, selection=selection),
        as_json=json, text=render.status)


COMMANDS = (spec.Command(
    ("status",), "Coordination state: prefer --repo/--target or --batch-id scope for lane "
    "decisions.",
    (OPT_REPO, OPT_TARGET, BATCH_ID, JSON,
     Opt("--include-archived", "include_archived", "flag", help="Unscoped status: also list archive/."),
     Opt("--events", "events", "int", minimum=1, metavar="N",
         help="Recent events per batch (default 20 in full status; all in batch scope)."),
     Opt("--all-events", "all_events", "flag", help="Show every event."),
     Opt("--watch", "watch", "flag",
         help="Refresh until Ctrl-C (a live view on a terminal, snapshots otherwise)."),
     Opt("--interval", "interval", "custom", default=2.0, parse=seconds_at_least(0.2),
         metavar="SECONDS", help="--watch refresh period."),
     BACKEND),
    status, **AGENT_COORD),)
