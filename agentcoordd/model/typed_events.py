"""The typed event types (pure): the four operational signals of record-event and
the two answers `agentcoordctl answer` writes, with their required fields and
allowed values. One table: record-event and answer check writes against it,
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
    # Answers to the two requests: reply_to is the request's event_id.
    "help_answered": {"reply_to": None, "message": None},
    "escalation_answered": {"reply_to": None, "message": None},
}
TYPED_FIELDS = ("reason", "from_route", "to_route", "evidence", "severity", "category", "kind",
                "reply_to", "decision")
# Typed fields a type may carry but need not (free-form when present).
OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "help_answered": ("decision",),
    "escalation_answered": ("decision",),
}
# A request type and the type of its answer.
ANSWER_TYPES: dict[str, str] = {
    "help_requested": "help_answered",
    "escalation_requested": "escalation_answered",
}

Problem = tuple[str, str]  # (kind: "foreign" | "missing" | "not_allowed", field)


def problems(event_type: str, values: dict[str, object]) -> list[Problem]:
    """What is wrong with a typed event's fields, in agent-coord's order: fields foreign
    to the type, then each required one that is missing (an enum value must not be
    empty, a free-form one not blank), then enum values outside their set. Empty for
    free-form types. Callers word them (record-event as agent-coord, validate as paths)."""
    rules = TYPED_EVENTS.get(event_type)
    if rules is None:
        return []
    optional = OPTIONAL_FIELDS.get(event_type, ())
    found: list[Problem] = [("foreign", name) for name in TYPED_FIELDS
                            if name not in rules and name not in optional
                            and values.get(name) is not None]
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


def contract_table() -> dict[str, dict[str, object]]:
    """The table as the event contract publishes it (`x-typed-events`)."""
    table: dict[str, dict[str, object]] = {}
    for event_type, rules in TYPED_EVENTS.items():
        entry: dict[str, object] = {"required": list(rules)}
        allowed = {name: list(values) for name, values in rules.items() if values is not None}
        if allowed:
            entry["allowed"] = allowed
        if event_type in OPTIONAL_FIELDS:
            entry["optional"] = list(OPTIONAL_FIELDS[event_type])
        answers = [req for req, answer in ANSWER_TYPES.items() if answer == event_type]
        if answers:
            entry["answers"] = answers[0]
        table[event_type] = entry
    return table
