"""The four typed operational signals of record-event (pure): their required
fields and allowed values. One table: record-event checks writes against it,
`validate --family event` and the published contracts describe it."""

from __future__ import annotations

# The four typed operational signals: required fields and their allowed values
# (None = free-form but required and non-empty).
TYPED_EVENTS: dict[str, dict[str, frozenset[str] | None]] = {
    "help_requested": {"reason": frozenset({"blocked-user-input", "question", "permission"})},
    "escalation_requested": {"from_route": None, "to_route": None, "evidence": None},
    "error": {
        "severity": frozenset({"P0", "P1", "P2", "P3"}),
        "category": None,
        "message": None,
    },
    "human_intervention": {"kind": frozenset({"takeover", "supersede", "manual-fix", "drain"})},
}
TYPED_FIELDS = ("reason", "from_route", "to_route", "evidence", "severity", "category", "kind")
