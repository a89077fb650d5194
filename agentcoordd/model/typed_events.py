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

Problem = tuple[str, str]  # (kind: "foreign" | "missing" | "not_allowed", field)


def problems(event_type: str, values: dict[str, object]) -> list[Problem]:
    """What is wrong with a typed event's fields, in agent-coord's order: fields foreign
    to the type, then each required one that is missing (an enum value must not be
    empty, a free-form one not blank), then enum values outside their set. Empty for
    free-form types. Callers word them (record-event as agent-coord, validate as paths)."""
    rules = TYPED_EVENTS.get(event_type)
    if rules is None:
        return []
    found: list[Problem] = [("foreign", name) for name in TYPED_FIELDS
                            if name not in rules and values.get(name) is not None]
    for name, allowed in rules.items():
        value = values.get(name)
        text = value if isinstance(value, str) else ""
        if not (text if allowed is not None else text.strip()):
            found.append(("missing", name))
    for name, allowed in rules.items():
        value = values.get(name)
        if allowed is not None and isinstance(value, str) and value and value not in allowed:
            found.append(("not_allowed", name))
    return found
