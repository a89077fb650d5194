"""Batch blocker contract (schema/state/v1/batch-blocker/), keyed by (workspace, batch_id).

The blocker payload uses the dashboard's names (camelCase recommendedReply);
the envelope stays snake_case. recommendedReply is absent by omission only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import Closed, NonEmpty, Workspace

LOGICAL_KEY = ("workspace", "batch_id")


class Blocker(Closed, kw_only=True):
    """What the dashboard renders as the Blocker panel; at least one decision."""

    message: NonEmpty
    decisions: Annotated[list[NonEmpty], msgspec.Meta(min_length=1)]
    recommendedReply: NonEmpty | UnsetType = UNSET  # noqa: N815 (dashboard contract name)


class BatchBlocker(Closed, kw_only=True):
    """A structured blocker persisted on a batch when a supervisor needs operator authority."""

    schema_version: Literal[1]
    workspace: Workspace
    batch_id: NonEmpty
    blocker: Blocker


def panel(record: BatchBlocker) -> dict[str, Any]:
    """The panel payload; an omitted recommendedReply renders as null (no suggestion)."""
    b = record.blocker
    return {
        "message": b.message,
        "decisions": list(b.decisions),
        "recommendedReply": None if b.recommendedReply is UNSET else b.recommendedReply,
    }
