"""Host-limit contract (schema/state/v1/host-limit.schema.json).

A usage-limit observation keyed by (workspace, machine, quota_host, scope).
quota_host is a canonical quota-pool id, distinct from the lane `host`
(app/wrapper) metadata; mapping a provider to a quota host is out of scope.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import (
    Closed,
    NonEmpty,
    Open,
    Timestamp,
    Violation,
    Workspace,
    duplicate_keys,
    rule,
    timestamp,
)

LOGICAL_KEY = ("workspace", "machine", "quota_host", "scope")
BLOCKED_ON_LIMIT = "blocked-on-limit"

QuotaId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=128,
        pattern=r"^[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$",
        extra_json_schema={
            "description": "Canonical: trimmed and lowercased before writing; ASCII letters, "
            "digits, dot, underscore, hyphen; no scheme, port, path, account or credential."
        },
    ),
]


class HostLimit(Closed, kw_only=True):
    """A machine + quota-host scoped usage-limit observation.

    cleared_at is required when status is cleared and not permitted while active.
    An active record whose non-null resets_at is at or before projection time is
    no longer effective; resets_at null means the reset time is unknown.
    """

    __schema_extra__: ClassVar[dict[str, Any]] = {
        "allOf": [
            {
                "if": {"properties": {"status": {"const": "cleared"}}},
                "then": {"required": ["cleared_at"]},
                "else": {"not": {"required": ["cleared_at"]}},
            }
        ]
    }

    schema_version: Literal[1]
    workspace: Workspace
    machine: NonEmpty
    quota_host: QuotaId
    scope: QuotaId
    status: Literal["active", "cleared"]
    observed_at: Timestamp
    resets_at: Timestamp | None
    source: Literal["manual", "host-message", "hook", "probe"]
    cleared_at: Timestamp | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.status == "cleared" and self.cleared_at is UNSET:
            raise rule("cleared_at", "required when status is cleared")
        if self.status == "active" and self.cleared_at is not UNSET:
            raise rule("cleared_at", "not permitted while status is active")


class HostLimitStatus(Open, kw_only=True):
    """Additive status fragment: an optional host_limits section.

    Items are unique by (workspace, machine, quota_host, scope); that is a
    producer invariant checked procedurally, not by the schema.
    """

    host_limits: list[HostLimit] | UnsetType = UNSET


def canonical_quota_host(raw: str) -> str:
    """Trim and lowercase; the result must still match the QuotaId pattern."""
    return raw.strip().lower()


def logical_key(record: HostLimit) -> tuple[str, ...]:
    return tuple(getattr(record, f) for f in LOGICAL_KEY)


def procedural_status(projection: HostLimitStatus) -> list[Violation]:
    if projection.host_limits is UNSET:
        return []
    return duplicate_keys(projection.host_limits, logical_key, "$.host_limits", LOGICAL_KEY)


def is_effective(record: HostLimit, as_of: dt.datetime) -> bool:
    if record.status != "active":
        return False
    return record.resets_at is None or timestamp(record.resets_at) > as_of


def lane_statuses(
    lanes: list[dict[str, Any]], records: list[HostLimit], as_of: dt.datetime
) -> dict[str, str | None]:
    """blocked-on-limit for lanes carrying an explicit matching quota_host, else None.

    A lane matches an effective record on (workspace, machine, quota_host); a
    lane without quota_host is never derived as blocked (the lane `host` field
    is not a quota host).
    """
    effective = [r for r in records if is_effective(r, as_of)]
    out: dict[str, str | None] = {}
    for lane in lanes:
        blocked = lane.get("quota_host") is not None and any(
            (r.workspace, r.machine, r.quota_host)
            == (lane.get("workspace", "default"), lane.get("machine"), lane.get("quota_host"))
            for r in effective
        )
        out[lane["lane"]] = BLOCKED_ON_LIMIT if blocked else None
    return out
