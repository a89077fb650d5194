"""Batch merge-authority contract (schema/state/v1/merge-authority/).

The canonical short enum none | ask | auto, persisted additively on the batch
manifest. Absent (a legacy batch) is signalled by omission only, never null,
and renders as an em dash — distinct from an explicit none.
"""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import EM_DASH, Open

MergeAuthority = Literal["none", "ask", "auto"]

# The pr-batch launch vocabulary, mapped before persistence (the verbose form
# is never stored).
LAUNCH_VOCABULARY: dict[str, MergeAuthority] = {
    "auto_merge_when_gates_pass": "auto",
    "ask": "ask",
    "none": "none",
}


class BatchManifestProjection(Open, kw_only=True):
    """Embeddable batch-manifest fragment: merge_authority optional, never null."""

    merge_authority: MergeAuthority | UnsetType = UNSET


def from_launch(value: str) -> MergeAuthority:
    try:
        return LAUNCH_VOCABULARY[value]
    except KeyError:
        raise ValueError(
            f"unknown launch merge authority {value!r} "
            f"(known: {', '.join(sorted(LAUNCH_VOCABULARY))})"
        ) from None


def drawer_value(projection: BatchManifestProjection) -> str:
    return EM_DASH if projection.merge_authority is UNSET else projection.merge_authority
