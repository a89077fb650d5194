"""The four typed operational signals of record-event (pure): their required
fields and allowed values. One table: record-event checks writes against it,
`validate --family event` and the published contracts describe it."""

from __future__ import annotations

# The four typed operational signals: required fields, in the order they are
# checked, and their allowed values in agent-coord's order (None = free-form
# but required and not blank).
TYPED_EVENTS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "help_requested": {"reason": ("blocked-user-input", "question", "permission")},
    "escalation_requested": {"from_route": None, "to_route": None, "evidence": None},
    "error": {"severity": ("P0", "P1", "P2", "P3"), "category": None, "message": None},
    "human_intervention": {"kind": ("takeover", "supersede", "manual-fix", "drain")},
}
TYPED_FIELDS = ("reason", "from_route", "to_route", "evidence", "severity", "category", "kind")
