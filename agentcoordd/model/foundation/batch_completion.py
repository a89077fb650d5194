"""Batch completion-report contract (schema/state/v1/batch-completion/).

Keyed by (workspace, batch_id). The dashboard payload (audit, completion,
finalReport) uses the dashboard report contract's camelCase names verbatim;
the envelope stays snake_case. Optional metrics are never omitted: unknown is
null or the em dash.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import (
    EM_DASH,
    Closed,
    EmDash,
    HttpUrl,
    NonEmpty,
    Workspace,
    is_unknown,
)

LOGICAL_KEY = ("workspace", "batch_id")

Scalar = str | float | bool | None


class MetadataPair(Closed, kw_only=True):
    """A labelled value; v renders as a link when href is present."""

    k: NonEmpty
    v: Scalar
    href: HttpUrl | UnsetType = UNSET


class Link(Closed, kw_only=True):
    label: NonEmpty
    href: HttpUrl


class Audit(Closed, kw_only=True):
    """The audit chip. author folds version and timestamp; there is no version field."""

    verdict: Literal["clean", "findings", "pending"]
    author: NonEmpty


class CompletionState(Closed, kw_only=True):
    """live is required; replay is a pair or unknown (null / "—"), never omitted."""

    live: MetadataPair
    replay: MetadataPair | None | EmDash


class Baseline(Closed, kw_only=True):
    k: NonEmpty | UnsetType = UNSET
    v: Scalar | UnsetType = UNSET
    path: NonEmpty
    href: HttpUrl | UnsetType = UNSET


class Outcome(Closed, kw_only=True):
    """A per-lane row; references are plain text unless links are given."""

    lane: NonEmpty
    refs: str | UnsetType = UNSET
    links: list[Link] | UnsetType = UNSET
    route: str | UnsetType = UNSET
    pr: str | UnsetType = UNSET
    sha: str | UnsetType = UNSET
    issue: str | UnsetType = UNSET


class Completion(Closed, kw_only=True):
    """The completion table; usage/tokensTotal/cost/duration are required-but-unknowable."""

    state: CompletionState
    receipts: Annotated[list[MetadataPair], msgspec.Meta(min_length=1)]
    baseline: Baseline
    outcomes: list[Outcome]
    usage: str | dict[str, Any] | None
    tokensTotal: Annotated[int, msgspec.Meta(ge=0)] | None | EmDash  # noqa: N815
    cost: Annotated[float, msgspec.Meta(ge=0)] | None | EmDash
    duration: str | Annotated[float, msgspec.Meta(ge=0)] | None


class BatchCompletion(Closed, kw_only=True):
    """A completed batch's audit, completion report and final report.

    Archive-ready requires state.live, audit and at least one receipt.
    """

    schema_version: Literal[1]
    workspace: Workspace
    batch_id: NonEmpty
    audit: Audit
    completion: Completion
    finalReport: NonEmpty  # noqa: N815


def _rendered(value: Any) -> Any:
    return EM_DASH if is_unknown(value) else value


def drawer(record: BatchCompletion) -> dict[str, Any]:
    """What the dashboard drawer renders: chip, outcome rows, metrics, final report."""
    c = record.completion
    return {
        "audit_chip": {"verdict": record.audit.verdict, "author": record.audit.author},
        "outcome_rows": [
            {
                "lane": o.lane,
                "refs": "" if o.refs is UNSET else o.refs,
                "link_labels": [] if o.links is UNSET else [link.label for link in o.links],
            }
            for o in c.outcomes
        ],
        "rendered_metrics": {
            "usage": _rendered(c.usage),
            "tokensTotal": _rendered(c.tokensTotal),
            "cost": _rendered(c.cost),
            "duration": _rendered(c.duration),
        },
        "final_report": record.finalReport,
    }
