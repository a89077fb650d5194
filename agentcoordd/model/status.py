"""Heartbeat / ordinary-event status vocabulary and its write-time normalization."""

from __future__ import annotations

from typing import NamedTuple

WORKING_STATUSES = (
    "in_progress",
    "blocked",
    "blocked_user_input",
    "waiting_on_checks_or_review",
    "external_gate_failing",
    "no_pr_evidence",
    "failed",
)
TERMINAL_STATUSES = (
    "done",
    "merged",
    "ready",
    "ready_gates_clean",
    "ready_no_merge_authority",
    "abandoned",
    "superseded",
)
CANONICAL_STATUSES = WORKING_STATUSES + TERMINAL_STATUSES
STATUS_ALIASES = {
    "complete": "done",
    "completed": "done",
    "ready_to_merge": "ready",
    "ready_handoff": "ready",
    "ready_for_coordinator": "ready",
    "in_process": "in_progress",
    "claimed": "in_progress",
    "implementing": "in_progress",
    "validating": "in_progress",
    "pushing": "in_progress",
}
# Terminal statuses that satisfy a dependency; legacy rows may still say complete(d).
DEPENDENCY_TERMINAL_STATUSES = (
    "done",
    "merged",
    "ready",
    "ready_gates_clean",
    "ready_no_merge_authority",
    "complete",
    "completed",
)
LANE_TERMINALS = ("done", "abandoned", "superseded")
DEFAULT_HEARTBEAT_STATUS = "in_progress"


class NormalizedStatus(NamedTuple):
    status: str
    status_raw: str | None  # the caller's spelling when it was changed or unknown
    warning: str | None


def normalize_status(value: str) -> NormalizedStatus:
    """Fold case and hyphens, then apply the alias map; unknown values are kept."""
    folded = value.strip().lower().replace("-", "_")
    canonical = STATUS_ALIASES.get(folded, folded)
    if canonical in CANONICAL_STATUSES:
        return NormalizedStatus(canonical, None if canonical == value else value, None)
    warning = (
        f'status "{value}" is not in the canonical status vocabulary; preserving it '
        "verbatim with a status_raw copy. Canonical statuses: "
        + ", ".join(CANONICAL_STATUSES)
        + "."
    )
    return NormalizedStatus(value, value, warning)


def satisfies_dependency(status: object) -> bool:
    return isinstance(status, str) and status in DEPENDENCY_TERMINAL_STATUSES


def is_terminal(status: object) -> bool:
    return isinstance(status, str) and status in TERMINAL_STATUSES
