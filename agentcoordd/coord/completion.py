"""batch complete: the batch completion report (batch completion v1), on the manifest.

Written when the last lane of a batch closes (the daemon calls
`complete_if_done` after a terminal closeout) or on `batch complete`. The
record is the contract's: the batch-audit verdict and its author (this
daemon, its version and the time), the receipts (each closed lane's
terminal and evidence URL), the baseline (the registered manifest), the
per-lane outcomes (targets, route chip, PR), and the optional metrics from
the batch's usage records — input/output tokens, their total and the cost,
each unknown (null) when no record knows it, never 0 — and the duration from
registration to completion. `finalReport` is the operator's report
(`--report FILE`), else one generated line.

It is kept as the manifest's `completion` field (the record is keyed by
(workspace, batch_id), as the batch is: docs/compat.md#batch-records-on-the-manifest).
Idempotent: with a record already there, a retry answers it unchanged; only
a different `--report` writes it again (with a fresh audit).
"""

from __future__ import annotations

from typing import Any

from agentcoordd import __version__
from agentcoordd.coord.audit import batch_audit
from agentcoordd.coord.batches import lane_name_of, lane_targets_of, update_registered
from agentcoordd.coord.common import text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.health import pr_of
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.foundation import route as route_contract
from agentcoordd.model.foundation import usage as usage_contract
from agentcoordd.model.timefmt import format_ts, parse_ts
from agentcoordd.model.validation import contract_error

COMPLETION_FIELD = "completion"
# batch-audit's verdict as the audit chip says it (an audit that could not run is pending)
AUDIT_CHIP = {"complete": "clean", "incomplete": "findings"}


def archive_ready(record: dict[str, Any]) -> bool:
    """The contract's rule: state.live, an audit and at least one receipt."""
    completion = record.get("completion") or {}
    return bool((completion.get("state") or {}).get("live") and record.get("audit")
                and completion.get("receipts"))


def _http(url: Any) -> bool:
    return isinstance(url, str) and url.lower().startswith(("http://", "https://"))


def _lanes(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    lanes = manifest.get("lanes")
    return [lane for lane in lanes if isinstance(lane, dict) and lane_name_of(lane)] \
        if isinstance(lanes, list) else []


def _outcome(lane: dict[str, Any]) -> dict[str, Any]:
    targets = lane_targets_of(lane)
    row: dict[str, Any] = {"lane": lane_name_of(lane)}
    words = [str(lane["terminal"])] if lane.get("terminal") else []
    if targets:
        words.append(", ".join(f"#{t}" for t in targets))
    if words:
        row["refs"] = " · ".join(words)
    chip = route_contract.chip_text(lane.get("route"))
    if chip is not None:
        row["route"] = chip
    pr = pr_of(lane.get("pr_url"))
    if pr is not None:
        row["pr"] = f"#{pr[1]}"
        row["links"] = [{"label": f"#{pr[1]}", "href": lane["pr_url"]}]
    return row


def _receipts(lanes: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    receipts = []
    for lane in lanes:
        if lane.get("terminal"):
            pair: dict[str, Any] = {"k": str(lane_name_of(lane)), "v": str(lane["terminal"])}
            if _http(lane.get("evidence_url")):
                pair["href"] = lane["evidence_url"]
            receipts.append(pair)
    return receipts or [{"k": "manifest", "v": path}]


def _metrics(manifest: dict[str, Any], now: str) -> dict[str, Any]:
    tiles = usage_contract.tiles(manifest.get("usage"))
    totals = tiles["batch_totals"] if tiles else {}
    tokens_in, tokens_out = totals.get("input_tokens"), totals.get("output_tokens")
    known = [v for v in (tokens_in, tokens_out) if isinstance(v, int)]
    started = parse_ts(manifest.get("registered_at"))
    ended = parse_ts(manifest.get("completed_at")) or parse_ts(now)
    return {
        "usage": {"input": tokens_in, "output": tokens_out} if tiles else None,
        "tokensTotal": sum(known) if known else None,
        "cost": totals.get("cost"),
        "duration": max(0.0, (ended - started).total_seconds()) if started and ended else None,
    }


def build(manifest: dict[str, Any], batch_id: str, verdict: str, now: str,
          report: str | None) -> dict[str, Any]:
    """The completion record of `manifest` as of `now` (pure: the audit verdict given)."""
    path = ids.batch_path(batch_id)
    lanes = _lanes(manifest)
    counts: dict[str, int] = {}
    for lane in lanes:
        key = str(lane.get("terminal") or "open")
        counts[key] = counts.get(key, 0) + 1
    summary = ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))
    return {
        "schema_version": 1,
        "workspace": "default",
        "batch_id": batch_id,
        "audit": {"verdict": verdict, "author": f"agentcoordd · v{__version__} · {now}"},
        "completion": {
            "state": {"live": {"k": "live", "v": path}, "replay": None},
            "receipts": _receipts(lanes, path),
            "baseline": {"k": "registered_at", "v": manifest.get("registered_at"), "path": path}
            if isinstance(manifest.get("registered_at"), str) else {"path": path},
            "outcomes": [_outcome(lane) for lane in lanes],
            **_metrics(manifest, now),
        },
        "finalReport": report or f"batch {batch_id} completed: {summary or 'no lanes'}",
    }


async def complete(ctx: Ctx, *, batch_id: str, report: str | None = None) -> dict[str, Any]:
    """Write (or answer) the batch's completion record; see the module docstring."""
    ids.batch_id(batch_id)
    text_field("report", report)
    if report is not None and not report.strip():
        raise UsageError("--report is empty")
    current = await ctx.store.get(ids.batch_path(batch_id))
    held = current.data.get(COMPLETION_FIELD) if current and isinstance(current.data, dict) else None
    if isinstance(held, dict) and (report is None or held.get("finalReport") == report):
        return {"action": "exists", "batch_id": batch_id, "record": held,
                "archive_ready": archive_ready(held)}
    audit = await batch_audit(ctx, batch_id=batch_id)
    verdict = AUDIT_CHIP.get(str(audit.get("verdict")), "pending")
    now = format_ts(ctx.clock.now())

    def change(manifest: dict[str, Any]) -> dict[str, Any]:
        record = build(manifest, batch_id, verdict, now, report)
        error = contract_error("batch_completion", record, "batch completion report")
        if error is not None:
            raise error
        manifest[COMPLETION_FIELD] = record
        return record

    record = await update_registered(ctx, batch_id, change)
    return {"action": "written", "batch_id": batch_id, "record": record,
            "archive_ready": archive_ready(record)}


async def complete_closed_batches(ctx: Ctx) -> None:
    """After a command that may have closed lanes: each batch a lane_closed it wrote
    belongs to gets its completion record if that closeout completed it."""
    closed = {record.get("batch_id") for _path, record in ctx.written
              if isinstance(record, dict) and record.get("type") == "lane_closed"}
    for batch_id in sorted(b for b in closed if isinstance(b, str) and b):
        await complete_if_done(ctx, batch_id)


async def complete_if_done(ctx: Ctx, batch_id: str) -> None:
    """Write the record when the batch is completed and has none yet. Best effort: a
    failure warns, the closeout stands."""
    try:
        current = await ctx.store.get(ids.batch_path(batch_id))
        manifest = current.data if current is not None else None
        if (isinstance(manifest, dict) and manifest.get("status") == "completed"
                and COMPLETION_FIELD not in manifest):
            await complete(ctx, batch_id=batch_id)
    except CoordError as exc:
        ctx.warn(f"batch {batch_id} completion report not written: {exc.message}")
