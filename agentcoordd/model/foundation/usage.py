"""Usage record contract (schema/state/v1/usage/usage-record.schema.json).

One record per model, keyed by (workspace, repo, batch_id, lane_name,
agent_id, target, model). input_tokens, output_tokens and cost are never
omitted: an unknown value is null or the em dash, never a fabricated zero.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import (
    Closed,
    EmDash,
    NonEmpty,
    Open,
    RepoName,
    Timestamp,
    Violation,
    Workspace,
    duplicate_keys,
    is_unknown,
    timestamp,
)

LOGICAL_KEY = ("workspace", "repo", "batch_id", "lane_name", "agent_id", "target", "model")
METRICS = ("input_tokens", "output_tokens", "cost")

TokenCount = Annotated[int, msgspec.Meta(ge=0)] | None | EmDash
Cost = Annotated[float, msgspec.Meta(ge=0)] | None | EmDash


class UsageRecord(Closed, kw_only=True):
    """Per-model token and estimated-cost telemetry for one lane/agent.

    Metrics are required keys; null and "—" both mean unknown. currency may be
    omitted (absent means USD); v1 cost is USD only.
    """

    schema_version: Literal[1]
    workspace: Workspace
    repo: RepoName
    target: NonEmpty
    batch_id: NonEmpty
    lane_name: NonEmpty
    agent_id: NonEmpty
    model: NonEmpty
    input_tokens: TokenCount
    output_tokens: TokenCount
    cost: Cost
    currency: Literal["USD"] | UnsetType = UNSET
    reported_at: Timestamp


class UsageStatus(Open, kw_only=True):
    """Additive status fragment: an optional usage section, unique by the logical key
    (a producer invariant checked procedurally)."""

    usage: list[UsageRecord] | UnsetType = UNSET


def logical_key(record: UsageRecord) -> tuple[str, ...]:
    return tuple(getattr(record, f) for f in LOGICAL_KEY)


def procedural_status(projection: UsageStatus) -> list[Violation]:
    if projection.usage is UNSET:
        return []
    return duplicate_keys(projection.usage, logical_key, "$.usage", LOGICAL_KEY)


def supersede(records: list[UsageRecord]) -> list[UsageRecord]:
    """Later reports for one logical key supersede earlier ones (by reported_at)."""
    latest: dict[tuple[str, ...], UsageRecord] = {}
    for record in records:
        key = logical_key(record)
        held = latest.get(key)
        if held is None or timestamp(record.reported_at) >= timestamp(held.reported_at):
            latest[key] = record
    return list(latest.values())


def _sum(values: list[Any]) -> int | float | None:
    """Unknown values are excluded; with no numeric contributor the sum is unknown."""
    known = [v for v in values if not is_unknown(v)]
    if not known:
        return None
    if all(isinstance(v, int) for v in known):
        return sum(known)
    return float(sum(Decimal(str(v)) for v in known))  # no binary-float drift in tiles


def aggregate(records: list[UsageRecord]) -> dict[str, Any]:
    """tokens_by_model, batch_totals and how many records carry an unknown metric."""
    by_model: dict[str, list[UsageRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    return {
        "tokens_by_model": {
            model: {m: _sum([getattr(r, m) for r in rows]) for m in METRICS}
            for model, rows in by_model.items()
        },
        "batch_totals": {m: _sum([getattr(r, m) for r in records]) for m in METRICS},
        "records_with_unknown_metrics": sum(
            1 for r in records if any(is_unknown(getattr(r, m)) for m in METRICS)
        ),
    }


def tiles(rows: Any) -> dict[str, Any] | None:
    """A batch's usage tiles from the records stored with it (None: none reported).

    Rows that do not hold to the contract are left out of the sums and counted
    (`invalid_records`), so a hand-edited row never becomes a number it does not say.
    """
    if not isinstance(rows, list) or not rows:
        return None
    valid: list[UsageRecord] = []
    for row in rows:
        try:
            valid.append(msgspec.convert(row, UsageRecord))
        except (msgspec.ValidationError, ValueError):
            continue
    summary = aggregate(supersede(valid))
    summary["currency"] = "USD"
    summary["records"] = len(valid)
    if len(valid) < len(rows):
        summary["invalid_records"] = len(rows) - len(valid)
    return summary
