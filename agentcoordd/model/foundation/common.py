"""Shared pieces of the schema/state/v1 foundation contracts.

Each contract is one or more msgspec Structs. A Struct says what the JSON
Schema says (types, bounds, patterns, closed objects, the if/then rules via
`__post_init__`, emitted into the schema through `__schema_extra__`); the
rules a schema cannot say live next to it as `procedural_*` functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

import msgspec

from agentcoordd.model.records import HttpUrl, NonEmpty, RepoName, Timestamp
from agentcoordd.model.timefmt import parse_ts

__all__ = [
    "EM_DASH",
    "CanonicalId",
    "Closed",
    "EmDash",
    "HttpUrl",
    "NonEmpty",
    "Open",
    "RepoName",
    "Timestamp",
    "Violation",
    "Workspace",
    "duplicate_keys",
    "is_unknown",
    "rule",
    "timestamp",
]

EM_DASH = "—"
EmDash = Literal["—"]

Workspace = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        extra_json_schema={
            "default": "default",
            "description": "Tenant/workspace dimension; self-hosted producers use default.",
        },
    ),
]
CanonicalId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=128,
        pattern=r"^[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$",
        extra_json_schema={
            "description": "Canonical identifier: lowercase ASCII letters, digits, dot, "
            "underscore or hyphen; starts and ends with a letter or digit."
        },
    ),
]


class Violation(msgspec.Struct, frozen=True):
    """One contract violation: a JSON path into the record and a one-line message."""

    path: str
    message: str


class Closed(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A foundation record whose schema is closed (additionalProperties: false)."""


class Open(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An embeddable projection: other properties of the host record stay valid."""


def rule(field: str, message: str) -> ValueError:
    """A conditional-rule failure raised from `__post_init__`, naming its field.

    msgspec reports the Struct's own path; validate.py appends `field` to it.
    """
    return ValueError(f"@{field}: {message}")


def timestamp(value: str) -> dt.datetime:
    parsed = parse_ts(value)
    if parsed is None:  # the Timestamp pattern already held; keep the type honest
        raise ValueError(f"not an RFC 3339 date-time: {value!r}")
    return parsed


def is_unknown(value: Any) -> bool:
    """An optional metric's unknown forms: null and the em dash are the same."""
    return value is None or value == EM_DASH


def duplicate_keys(
    items: Iterable[Any], key: Callable[[Any], tuple], path: str, fields: Iterable[str]
) -> list[Violation]:
    """Logical-key uniqueness over a list (a schema cannot say it)."""
    seen: dict[tuple, int] = {}
    found: list[Violation] = []
    names = ", ".join(fields)
    for index, item in enumerate(items):
        k = key(item)
        if k in seen:
            found.append(
                Violation(
                    f"{path}[{index}]",
                    f"duplicate logical key ({names}) = {list(k)!r}; first at {path}[{seen[k]}]",
                )
            )
        else:
            seen[k] = index
    return found
