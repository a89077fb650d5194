"""usage record: report one model's tokens and cost for a lane (usage record v1)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import AGENT_ID, BACKEND, BATCH_ID_REQUIRED, JSON, REPO, TARGET, run
from agentcoordctl.spec import REQUIRED, Opt
from agentcoordd import protocol as p

# What a reporter writes for a metric it does not know (also: leave the option out).
UNKNOWN_WORDS = ("unknown", "—", "-", "null")


def _metric(convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """A metric's parser: a non-negative finite number, or an unknown word (None)."""
    def parse(text: str) -> Any:
        if text.strip().lower() in UNKNOWN_WORDS:
            return None
        try:
            value = convert(text)
        except ValueError:
            raise ValueError(f"{text!r} is not {what} (or 'unknown')") from None
        if not (math.isfinite(value) and 0 <= value <= 2**53):
            raise ValueError(f"must be {what}, at least 0: {text}")
        return value
    return parse


TOKENS = _metric(int, "a whole number of tokens")
USD = _metric(float, "an amount in USD")


def _text(payload: dict[str, Any]) -> str:
    from agentcoordctl.render import unknown_or as shown

    r = payload.get("record") or {}
    verb = "updated" if payload.get("replaced") else "recorded"
    return (f"{verb} usage for {r.get('model')} on {r.get('batch_id')}/{r.get('lane_name')} "
            f"({r.get('agent_id')}): input {shown(r.get('input_tokens'))}, "
            f"output {shown(r.get('output_tokens'))}, cost USD {shown(r.get('cost'))}")


def record(*, batch_id: str, lane: str, agent_id: str, repo: str, target: str, model: str,
           input_tokens: int | None, output_tokens: int | None, cost: float | None,
           workspace: str | None, json: bool, selection: p.Selection) -> None:
    run(p.UsageRecord(batch_id=batch_id, lane=lane, agent_id=agent_id, repo=repo, target=target,
                      model=model, input_tokens=input_tokens, output_tokens=output_tokens,
                      cost=cost, workspace=workspace or "default", selection=selection),
        as_json=json, text=_text)


COMMANDS = (
    spec.Command(
        ("usage", "record"), "Report one model's token use and cost for a lane.\n\n"
        "One record per (workspace, repo, batch, lane, agent, target, model); a later report "
        "for the same key replaces the earlier one. A metric left out (or given as 'unknown') "
        "is stored as unknown (null) and stays unknown in every total: never a zero. "
        "Cost is USD only.",
        (BATCH_ID_REQUIRED,
         Opt("--lane", "lane", default=REQUIRED, metavar="NAME", help="The batch lane."),
         AGENT_ID, REPO, TARGET,
         Opt("--model", "model", default=REQUIRED, metavar="MODEL", help="Model id."),
         Opt("--input-tokens", "input_tokens", "custom", parse=TOKENS, metavar="N",
             help="Input tokens (omit or 'unknown' when not known)."),
         Opt("--output-tokens", "output_tokens", "custom", parse=TOKENS, metavar="N",
             help="Output tokens (omit or 'unknown' when not known)."),
         Opt("--cost", "cost", "custom", parse=USD, metavar="USD",
             help="Estimated cost in USD (omit or 'unknown' when not known)."),
         Opt("--workspace", "workspace", metavar="NAME", help="Workspace (default: default)."),
         JSON, BACKEND),
        record),
)
