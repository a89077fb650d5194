"""One msgspec Struct per record family, with the spec's required/optional fields.

Stored records are JSON objects that other tools also write. Reading goes
through `load(cls, raw)`: the Struct validates the fields we know, and
`dump(record, base=raw)` writes them back on top of the stored object, so
fields this version does not know survive a rewrite unchanged.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
import msgspec.structs

from agentcoordd.model.errors import OperationalError

SCHEMA_VERSION = 1
LANE_CLOSED_SCHEMA_VERSION = 2
ARCHIVE_SCHEMA_VERSION = 1

# Foreign writers store generation as a number or a string; keep what they wrote.
Generation = int | str

# Constrained strings the published contracts (contracts/, schema/) share. The
# Struct enforces them on decode and contracts.py emits them into the schemas.
RFC3339_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]"
    r":([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
HTTP_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+(?:[/?#]|$)"
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Timestamp = Annotated[
    str, msgspec.Meta(pattern=RFC3339_PATTERN, extra_json_schema={"format": "date-time"})
]
HttpUrl = Annotated[
    str, msgspec.Meta(pattern=HTTP_URL_PATTERN, extra_json_schema={"format": "uri"})
]
RepoName = Annotated[str, msgspec.Meta(pattern=r"^[^/]+/[^/]+$")]


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
    # The lane route contract (schema/state/v1/route/): "model/effort", or the object
    # form as JSON text ({"model": ..., "effort": ...}); stored additively, absent = omitted.
    route: str | dict[str, str] | None = None


class LaneMetadata(Metadata, kw_only=True):
    """Metadata plus the machine/session attribution tuple stamped on writes."""

    machine_id: str | None = None
    session_id: str | None = None
    session_source: str | None = None


class ClosedBy(Record, kw_only=True):
    """Who closed a lane: the closing agent and its machine (AGENT_COORD_MACHINE_ID or --host)."""

    agent_id: NonEmpty
    machine: NonEmpty


# release_mode of a claim agentcoordd released because its holder's watched process exited.
HOLDER_EXITED = "holder_exited"


class Claim(LaneMetadata, kw_only=True):
    """A target-scoped lease: claims/<owner>/<repo>/<target>.json."""

    schema_version: int
    repo: NonEmpty
    target: NonEmpty
    agent_id: NonEmpty
    status: str
    claimed_at: str
    updated_at: str
    expires_at: str
    batch_id: str | None = None
    branch: str | None = None
    released_by: str | None = None
    released_at: str | None = None
    release_mode: Literal["handoff", "holder_exited"] | None = None
    handoff_to: str | None = None
    handoff_note: str | None = None
    terminal: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None
    workspace: str | None = None
    closed_by: ClosedBy | None = None
    # A takeover: whose claim this grant displaced, and why (coord/lease.py).
    previous_holder: str | None = None
    takeover_reason: Literal["heartbeat_dead", "claim_expired", "forced"] | None = None
    takeover_note: str | None = None  # a forced takeover: the operator's reason
    fencing_token: int | None = None  # this grant's token (coord/lease.py)


class Heartbeat(LaneMetadata, kw_only=True):
    """An agent's liveness record: heartbeats/<agent-id>.json."""

    schema_version: int
    agent_id: NonEmpty
    status: str
    updated_at: str
    expires_at: str
    repo: str | None = None
    target: str | None = None
    batch_id: str | None = None
    branch: str | None = None
    status_raw: str | None = None


# A lane's optional start order (`ready`, `claim --next`): lower first, like P0 before P1.
LanePriority = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class Lane(Record, kw_only=True):
    """A registered lane; owner and targets are checked at registration.

    `pool: true` makes it a pool lane any agent may take with `claim --next` (its
    `owner` names the pool and never heartbeats); `priority` orders ready lanes
    (docs/contracts.md#pool-lanes-and-priority)."""

    name: str
    owner: str | None = None
    pool: bool | None = None
    priority: LanePriority | None = None
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

    batch_id: NonEmpty
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
    event_id: NonEmpty
    batch_id: NonEmpty
    type: NonEmpty
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
    # claim.acquired of a takeover, human_intervention of kind takeover
    previous_holder: str | None = None
    takeover_reason: str | None = None
    fencing_token: int | None = None  # claim.acquired: the grant's fencing token
    # typed operational-signal fields
    reason: str | None = None
    from_route: str | None = None
    to_route: str | None = None
    evidence: str | None = None
    severity: str | None = None
    category: str | None = None
    kind: str | None = None
    # answers (help_answered, escalation_answered): the request's event_id
    reply_to: str | None = None
    decision: str | None = None


class LaneClosed(LaneMetadata, kw_only=True):
    """The version-2 terminal closeout event (contracts/state-schema-v2.json).

    Consumers treat the declared terminal state as authoritative. The event id
    is a per-lane reservation (lane_closed-<digest>), not a chronology key.
    """

    schema_version: Literal[2]
    event_id: NonEmpty
    type: Literal["lane_closed"]
    repo: RepoName
    target: NonEmpty
    terminal: Literal["done", "abandoned", "superseded"]
    workspace: NonEmpty
    closed_by: ClosedBy
    at: Timestamp
    batch_id: NonEmpty | None = None
    lane: NonEmpty | None = None
    agent_id: NonEmpty | None = None
    branch: NonEmpty | None = None
    pr_url: HttpUrl | None = None
    pr_state: NonEmpty | None = None
    evidence_url: HttpUrl | None = None


# ---- archive envelopes (contracts/archive-record-schema-v1.json) ------------

# A hot record path as gc archives it (the ids.py grammar; no `.`/`..` segment).
_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9._:@+=,~-]*"
SOURCE_PATH_PATTERN = (
    rf"^(claims/{_SEGMENT}/{_SEGMENT}/{_SEGMENT}|heartbeats/{_SEGMENT}"
    rf"|batches/{_SEGMENT}|events/{_SEGMENT}/{_SEGMENT})\.json$"
)
SourcePath = Annotated[str, msgspec.Meta(pattern=SOURCE_PATH_PATTERN)]


# The two archive record families (`record_family`), named once.
ARCHIVED_RECORD = "archived_record"
COMPACTED_EVENTS = "compacted_events"
ARCHIVE_FAMILIES = (ARCHIVED_RECORD, COMPACTED_EVENTS)


class _ArchiveCommon(Record, kw_only=True, forbid_unknown_fields=True):
    schema_version: Literal[1]
    reason: NonEmpty
    synthetic: bool
    archived_at: Timestamp
    delete_after: Timestamp


class ArchivedRecord(_ArchiveCommon, kw_only=True, tag_field="record_family", tag=ARCHIVED_RECORD):
    """A single archived record: its hot source_path and the original data, verbatim."""

    source_path: SourcePath
    data: dict[str, Any]


class CompactedEvents(
    _ArchiveCommon, kw_only=True, tag_field="record_family", tag=COMPACTED_EVENTS
):
    """A terminal target compaction envelope.

    source_paths is the complete set of consumed hot event paths (renewals
    included); records is the retained first/last/terminal/phase-transition
    history and is not positionally aligned with source_paths.
    """

    __schema_extra__: ClassVar[dict[str, Any]] = {
        "properties": {"source_paths": {"uniqueItems": True}}
    }

    source_paths: Annotated[list[SourcePath], msgspec.Meta(min_length=1)]
    records: Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1)]

    def __post_init__(self) -> None:
        if len(set(self.source_paths)) != len(self.source_paths):
            raise ValueError("@source_paths: items must be unique")


ArchiveEnvelope = ArchivedRecord | CompactedEvents


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
