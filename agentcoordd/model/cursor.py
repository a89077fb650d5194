"""The event feed's order and its opaque, durable cursor (pure).

Events of a batch are ordered by `(at, ident)`: `at` (else `timestamp`) as
sortable UTC text, then the event's identity — its `event_id`, or for a JSON
Lines event without one its `path` (`history/x.jsonl:12`). The cursor names a
position in that order: `c1.` + base64url (no padding) of the JSON pair
`[at, ident]`. It is derived from the data only, so any daemon, before or after
a restart, reads it the same way; `--after C` means "every event whose key
sorts after C".
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from agentcoordd.model.errors import UsageError
from agentcoordd.model.timefmt import event_time

PREFIX = "c1."
MAX_CURSOR = 2048  # characters; a key part is at most 512
MAX_PART = 512

Key = tuple[str, str]
START: Key = ("", "")  # sorts before every event


def ident(event: dict[str, Any]) -> str:
    """The event's identity: event_id, else its path (a JSONL line without an id)."""
    event_id = event.get("event_id")
    if isinstance(event_id, str) and event_id:
        return event_id
    return str(event.get("path", ""))


def key(event: dict[str, Any]) -> Key:
    return (event_time(event), ident(event))


def encode(position: Key) -> str:
    raw = msgspec.json.encode([position[0][:MAX_PART], position[1][:MAX_PART]])
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(cursor: str) -> Key:
    """The position a cursor names; UsageError (exit 1, one line) for anything else."""
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR:
        raise UsageError(f"invalid --after cursor: longer than {MAX_CURSOR} characters")
    if not cursor.startswith(PREFIX):
        raise UsageError("invalid --after cursor: not a cursor printed by `events --json`")
    body = cursor[len(PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        pair = msgspec.json.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError, RecursionError):
        raise UsageError("invalid --after cursor: not a cursor printed by `events --json`") from None
    if (not isinstance(pair, list) or len(pair) != 2
            or not all(isinstance(part, str) and len(part) <= MAX_PART for part in pair)):
        raise UsageError("invalid --after cursor: not a cursor printed by `events --json`")
    return (pair[0], pair[1])
