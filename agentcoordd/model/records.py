"""One msgspec Struct per record family, with the spec's required/optional fields.

Stored records are JSON objects that other tools also write. Reading goes
through `load(cls, raw)`: the Struct validates the fields we know, and
`dump(record, base=raw)` writes them back on top of the stored object, so
fields this version does not know survive a rewrite unchanged.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, TypeVar

import msgspec
import msgspec.structs

from agentcoordd.model.errors import OperationalError

SCHEMA_VERSION = 1
LANE_CLOSED_SCHEMA_VERSION = 2
ARCHIVE_SCHEMA_VERSION = 1

# Foreign writers store generation as a number or a string; keep what they wrote.
Generation = int | str


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base: optional fields default to None and are omitted when unset."""


class Metadata(Record, kw_only=True):
    """The metadata options callers pass on claim, heartbeat, release and events."""

    thread_handle: str | None = None
    chat_handle: str | None = None
    host: str | None = None
    pr_url: str | None = None
    dashboard_url: str | None = None
    operator: str | None = None
    phase: str | None = None
    generation: Generation | None = None
    instance_id: str | None = None
    synthetic: bool | None = None
    synthetic_kind: str | None = None


class LaneMetadata(Metadata, kw_only=True):
    """Metadata plus the machine/session attribution tuple stamped on writes."""

    machine_id: str | None = None
    session_id: str | None = None
    session_source: str | None = None


class ClosedBy(Record, kw_only=True):
    agent_id: str
    machine: str


class Claim(LaneMetadata, kw_only=True):
    schema_version: int
    repo: str
    target: str
    agent_id: str
    status: str
    claimed_at: str
    updated_at: str
    expires_at: str
    batch_id: str | None = None
    branch: str | None = None
    released_by: str | None = None
    released_at: str | None = None
    release_mode: Literal["handoff"] | None = None
    handoff_to: str | None = None
    handoff_note: str | None = None
    terminal: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None
    workspace: str | None = None
    closed_by: ClosedBy | None = None


class Heartbeat(LaneMetadata, kw_only=True):
    schema_version: int
    agent_id: str
    status: str
    updated_at: str
    expires_at: str
    repo: str | None = None
    target: str | None = None
    batch_id: str | None = None
    branch: str | None = None
    status_raw: str | None = None


class Lane(Record, kw_only=True):
    """A registered lane; owner and targets are checked at registration."""

    name: str
    owner: str | None = None
    targets: list[Any] | None = None
    depends_on: str | list[str] | None = None
    status: str | None = None
    terminal: str | None = None
    closed_at: str | None = None
    closed_by: ClosedBy | None = None
    workspace: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None


class Batch(Record, kw_only=True):
    """A batch manifest. Lanes stay raw: a malformed lane must not hide the rest."""

    batch_id: str
    lanes: list[Any] = []
    schema_version: int | None = None
    repo: str | None = None
    objective: str | None = None
    status: str | None = None
    registered_at: str | None = None
    updated_at: str | None = None
    completed_at: str | None = None
    launch_prompt: str | None = None
    synthetic: bool | None = None
    synthetic_kind: str | None = None


class Event(LaneMetadata, kw_only=True):
    """An ordinary (schema version 1) append-only event."""

    schema_version: int
    event_id: str
    batch_id: str
    type: str
    at: str
    lane: str | None = None
    agent_id: str | None = None
    repo: str | None = None
    target: str | None = None
    branch: str | None = None
    status: str | None = None
    status_raw: str | None = None
    message: str | None = None
    previous_phase: str | None = None
    release_mode: str | None = None
    handoff_to: str | None = None
    handoff_note: str | None = None
    # typed operational-signal fields
    reason: str | None = None
    from_route: str | None = None
    to_route: str | None = None
    evidence: str | None = None
    severity: str | None = None
    category: str | None = None
    kind: str | None = None


class LaneClosed(LaneMetadata, kw_only=True):
    """The version-2 terminal closeout event (contracts/state-schema-v2.json)."""

    schema_version: Literal[2]
    event_id: str
    type: Literal["lane_closed"]
    repo: str
    target: str
    terminal: Literal["done", "abandoned", "superseded"]
    workspace: str
    closed_by: ClosedBy
    at: str
    batch_id: str | None = None
    lane: str | None = None
    agent_id: str | None = None
    branch: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None


R = TypeVar("R", bound=Record)


def load(cls: type[R], raw: object, path: str = "") -> R:
    """Validate a stored JSON value as `cls`; an invalid record names its path."""
    if not isinstance(raw, dict):
        raise OperationalError(f"invalid record at {path or '<record>'}: not a JSON object")
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        raise OperationalError(f"invalid record at {path or '<record>'}: {exc}") from None


def try_load(cls: type[R], raw: object) -> R | None:
    """Like `load`, but an invalid record is simply None (for liveness fallbacks)."""
    if not isinstance(raw, dict):
        return None
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError:
        return None


def dump(record: Record, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record as a JSON object: known fields first, then the stored unknowns.

    A known field set to None is removed, which is how stale attribution or a
    status_raw that no longer applies is cleared.
    """
    built = msgspec.to_builtins(record)
    # Required fields (schema_version, ids, …) lead, as in the spec's examples.
    known = {k: built[k] for k in _key_order(type(record)) if k in built}
    if not base:
        return known
    fields = set(type(record).__struct_fields__)
    return known | {k: v for k, v in base.items() if k not in fields}


@functools.cache
def _key_order(cls: type[Record]) -> tuple[str, ...]:
    infos = msgspec.structs.fields(cls)
    return tuple(f.encode_name for f in infos if f.required) + tuple(
        f.encode_name for f in infos if not f.required
    )
