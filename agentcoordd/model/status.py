"""Heartbeat / ordinary-event status vocabulary and its write-time normalization."""

from __future__ import annotations

from typing import NamedTuple

SPEC_WORKING_STATUSES = (
    "in_progress",
    "blocked",
    "blocked_user_input",
    "waiting_on_checks_or_review",
    "external_gate_failing",
    "no_pr_evidence",
    "failed",
)
# The telemetry contract's working statuses (a deliberate divergence, docs/compat.md#working-statuses):
# accepted without a warning and listed by `config show`, never terminal, never
# satisfying a dependency. Not in CANONICAL_STATUSES, so the unknown-status
# warning keeps the existing tool's exact text.
CONTRACT_WORKING_STATUSES = ("queued", "token_limit_pause", "continued")
WORKING_STATUSES = SPEC_WORKING_STATUSES + CONTRACT_WORKING_STATUSES
TERMINAL_STATUSES = (
    "done",
    "merged",
    "ready",
    "ready_gates_clean",
    "ready_no_merge_authority",
    "abandoned",
    "superseded",
)
# The spec's table (the warning lists exactly these); ACCEPTED adds the contract's.
CANONICAL_STATUSES = SPEC_WORKING_STATUSES + TERMINAL_STATUSES
ACCEPTED_STATUSES = WORKING_STATUSES + TERMINAL_STATUSES
# Statuses the contract gives its own event types, accepted without a warning
# on those types only (record-event): QA results on qa.* events and the stop
# signals' statuses on the stop events. Elsewhere they still warn.
QA_EVENT_STATUSES = ("requested", "in_progress", "passed", "failed")
STOP_EVENT_STATUSES = {"batch.stop_requested": "stop_requested", "batch.stopped": "stopped"}
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


def event_statuses(event_type: str | None) -> tuple[str, ...]:
    """Extra statuses an event of this type may carry without a warning."""
    if event_type is None:
        return ()
    if event_type.startswith("qa."):
        return QA_EVENT_STATUSES
    own = STOP_EVENT_STATUSES.get(event_type)
    return (own,) if own else ()


def normalize_status(value: str, *, event_type: str | None = None) -> NormalizedStatus:
    """Fold case and hyphens, then apply the alias map; unknown values are kept.

    `event_type` (record-event) also accepts that type's own statuses
    (`event_statuses`): `passed` on a qa.* event, say.
    """
    folded = value.strip().lower().replace("-", "_")
    if folded in event_statuses(event_type):
        return NormalizedStatus(folded, None if folded == value else value, None)
    canonical = STATUS_ALIASES.get(folded, folded)
    if canonical in ACCEPTED_STATUSES:
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
