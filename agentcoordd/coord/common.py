"""Small pieces every use case shares: metadata merging, field checks, CAS bounds."""

from __future__ import annotations

from typing import Any

import msgspec

from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.records import Metadata
from agentcoordd.model.validation import one_line, validate_record

# A lost CAS race re-reads and decides again; only persistent contention is exit 2.
CAS_ATTEMPTS = 12
# A record every lane of a batch rewrites (the manifest) is hotter than a claim.
MANIFEST_CAS_ATTEMPTS = 40

MAX_FIELD_BYTES = 8192


class WireData(dict):  # type: ignore[type-arg]
    """A payload made of wire types only (JSON-decoded records, str, numbers, lists,
    dicts): replied as it is. Other payloads go through `msgspec.to_builtins`, a
    copy that costs a full status of a big root as much as building it."""


def metadata_fields(meta: Metadata) -> dict[str, Any]:
    """The metadata options the caller actually passed (unset ones are absent), verbatim:
    agent-coord stores an empty or odd value as given (`--phase ''`, a kind without
    --synthetic); only terminal closeouts check theirs."""
    fields = msgspec.to_builtins(meta)
    for name, value in fields.items():
        if isinstance(value, str):
            text_field(name, value)
    if "route" in fields:
        fields["route"] = route_value(fields["route"])
    return fields


def route_value(text: Any) -> Any:
    """--route as stored: the compact "model/effort" string, or the object form given as
    JSON; anything the route contract refuses is exit 1 in its words."""
    value: Any = text
    if isinstance(text, str) and text.lstrip().startswith("{"):
        try:
            value = msgspec.json.decode(text)
        except msgspec.DecodeError:
            raise UsageError("--route: not a JSON object (use MODEL/EFFORT or "
                             '{"model": M, "effort": E})') from None
    found = validate_record("route", {"route": value})
    if found:
        raise UsageError(f"--route must be MODEL/EFFORT (one slash, no spaces) or the "
                         f"object form: {one_line(found[0])}")
    return value


def text_field(name: str, value: str | None, *, required: bool = False) -> str | None:
    """Free-text payload fields: bounded, valid UTF-8, stored as given (empty too, as in
    agent-coord); a required one must not be empty."""
    if value is None or (required and not value):
        if required:
            raise UsageError(f"missing required --{name.replace('_', '-')}")
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"--{name.replace('_', '-')} is not valid UTF-8") from None
    if size > MAX_FIELD_BYTES or "\x00" in value:
        raise UsageError(f"--{name.replace('_', '-')} is too long or contains NUL")
    return value


def contention(path: str) -> OperationalError:
    return OperationalError(
        f"storage contention on {path}: compare-and-swap kept failing; state is UNKNOWN, retry"
    )
