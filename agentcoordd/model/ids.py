"""Identifier and state-path validation: the only way a value becomes a path.

Every identifier that lands in a state path passes a whitelist, and every path
is checked again as a whole, so nothing accepted here can name a file outside
the state root (a property test proves it).
"""

from __future__ import annotations

import hashlib
import re

from agentcoordd.model.errors import UsageError

MAX_PATH_BYTES = 512
MAX_ARCHIVE_PATH_BYTES = 520
# A segment becomes a file name with ".json.lock" appended; stay far below 255.
MAX_SEGMENT_BYTES = 200
MAX_ATTRIBUTION_BYTES = 256

# The admission families (host limits, capacity reservations: docs/capacity.md)
# sit beside agent-coord's four; its tools read only their own directories.
ADMISSION_FAMILIES = ("host_limits", "capacity_profiles", "inboxes", "lane_occupancies",
                      "capacity_reservations", "capacity_holds")
FAMILIES = ("claims", "heartbeats", "batches", "events", *ADMISSION_FAMILIES)
ARCHIVE = "archive"

# Letters, digits and `_ : -`, with single dots between them — agent-coord's
# segment grammar (and the Worker's), so an id valid on one backend or tool is
# valid on all; no leading, trailing or doubled dot, so ids never collide with
# hidden temp files or `.`/`..` segments.
_SEGMENT = re.compile(r"[A-Za-z0-9_:-]+(?:\.[A-Za-z0-9_:-]+)*")
_ATTRIBUTION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+=/~-]*")


def one_line(text: str) -> str:
    """`text` with every non-printable character escaped (`\\n`, `\\x1b`, `\\u202e`, lone
    surrogates): an error or warning echoing a hostile value stays one line on the
    caller's stderr. Letters of any script stay as they are, as agent-coord prints them."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def shown(value: str, limit: int = 80) -> str:
    """A hostile value for a one-line error message: shortened, then `one_line`."""
    return one_line(value if len(value) <= limit else value[:limit - 3] + "...")


def _is_segment(value: object) -> bool:
    return (
        isinstance(value, str)
        and _SEGMENT.fullmatch(value) is not None
        and len(value.encode("utf-8")) <= MAX_SEGMENT_BYTES
    )


_SEGMENT_RULE = "letters, digits, '_', ':' and '-', with single dots between them"
# What each id accepts, appended to agent-coord's own words (`invalid target: #12`) so the
# caller learns the fix from the message.
WANT = {
    "target": "an issue or PR number or id, e.g. 12",
    "agent-id": f"{_SEGMENT_RULE}, e.g. worker-1",
    "batch-id": f"{_SEGMENT_RULE}, e.g. wave-10",
    "event type": f"{_SEGMENT_RULE}, e.g. lane.started",
    "event-id": "an event id as `events` prints it",
    "lane": f"{_SEGMENT_RULE}, e.g. api",
    "repo": "owner/name, e.g. acme/widgets",
    "workspace": f"{_SEGMENT_RULE}, e.g. default",
}


def invalid(kind: str, value: object, subject: str | None = None) -> UsageError:
    """`invalid KIND: VALUE (want …)`: agent-coord's first words, then what is accepted."""
    words = f"invalid {subject or kind}: {shown(str(value))}"
    # Any other id (an admission record's key, say) is a path segment.
    return UsageError(f"{words} (want {WANT.get(kind, _SEGMENT_RULE)})", words=words)


def _segment(kind: str, value: object) -> str:
    if not _is_segment(value):
        raise invalid(kind, value)
    return value  # type: ignore[return-value]


def agent_id(value: object) -> str:
    return _segment("agent-id", value)


def target(value: object) -> str:
    return _segment("target", value)


def batch_id(value: object) -> str:
    """Batch ids may contain `:`; dependency refs split at the last colon."""
    return _segment("batch-id", value)


def event_type(value: object) -> str:
    return _segment("event type", value)


def event_id(value: object) -> str:
    """An event's id: one path segment (an answer's `reply_to` names one)."""
    return _segment("event-id", value)


def event_lane(value: object) -> str:
    """An ordinary event's lane: payload, so any text but empty or a `batch:lane` ref
    (agent-coord's rule; a batch's own lane names are strict, see lane_name)."""
    if not isinstance(value, str) or not value:
        raise UsageError("--lane must not be empty")
    if ":" in value:
        raise UsageError(f"event lane {value} cannot contain ':'")
    return value


def lane_name(value: object) -> str:
    name = _segment("lane", value)
    if ":" in name:
        raise UsageError(f"invalid lane: {shown(name)} (lane names cannot contain ':')")
    return name


def repo(value: object) -> str:
    """`OWNER/REPO`: exactly one slash, both halves non-empty.

    Dot segments pass this shape check on purpose and are then refused by the
    path check with the path named, as the existing tool reports them.
    """
    text = value if isinstance(value, str) else str(value)
    if not text:  # an empty --repo is a missing one, as agent-coord says
        raise UsageError("missing required --repo")
    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise invalid("repo", text, "target repo")
    if not all(p in (".", "..") or _is_segment(p) for p in parts):
        raise invalid("repo", text, "target repo")
    return text


def repo_ref(value: object) -> str:
    """A repo carried as payload (heartbeat, event): dot segments are refused here too."""
    text = repo(value)
    if any(p in (".", "..") for p in text.split("/")):
        raise invalid("repo", text, "target repo")
    return text


def attribution(kind: str, value: str) -> str:
    """Machine and session ids: attribution metadata, never path segments."""
    if (
        _ATTRIBUTION.fullmatch(value) is None
        or len(value.encode("utf-8")) > MAX_ATTRIBUTION_BYTES
    ):
        raise UsageError(f"invalid {kind}: {shown(value)}")
    return value


def state_path(path: object) -> str:
    """A relative record path under one of the known families, at most 512 bytes."""
    if not isinstance(path, str):
        raise UsageError(f"unsafe state path: {shown(str(path))}")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"unsafe state path: {shown(path)}") from None
    segments = path.split("/")
    archived = segments[0] == ARCHIVE
    family = segments[1] if archived and len(segments) > 1 else segments[0]
    limit = MAX_ARCHIVE_PATH_BYTES if archived else MAX_PATH_BYTES
    if (
        size > limit
        or (archived and size - len(ARCHIVE) - 1 > MAX_PATH_BYTES)
        or family not in FAMILIES
        or not path.endswith(".json")
        or "\\" in path
        or "\x00" in path
        or any(s in ("", ".", "..") or s.startswith(".") for s in segments)
    ):
        raise UsageError(f"unsafe state path: {shown(path)}")
    return path


def state_prefix(prefix: object) -> str:
    """A listing prefix: a family directory or a directory below it."""
    if not isinstance(prefix, str) or not prefix:
        raise UsageError(f"unsafe state prefix: {shown(str(prefix))}")
    segments = prefix.split("/")
    archived = segments[0] == ARCHIVE
    family = segments[1] if archived and len(segments) > 1 else segments[0]
    if (
        (family not in FAMILIES and not (archived and len(segments) == 1))
        or len(prefix.encode("utf-8", "surrogatepass")) > MAX_ARCHIVE_PATH_BYTES
        or "\\" in prefix
        or "\x00" in prefix
        or any(s in ("", ".", "..") or s.startswith(".") for s in segments)
    ):
        raise UsageError(f"unsafe state prefix: {shown(prefix)}")
    return prefix


# ---- the state layout -------------------------------------------------------


def claim_path(repo_name: str, target_id: str) -> str:
    return state_path(f"claims/{repo(repo_name)}/{target(target_id)}.json")


def heartbeat_path(agent: str) -> str:
    return state_path(f"heartbeats/{agent_id(agent)}.json")


def batch_path(batch: str) -> str:
    return state_path(f"batches/{batch_id(batch)}.json")


def events_prefix(batch: str) -> str:
    return f"events/{batch_id(batch)}"


def event_path(batch: str, event_id: str) -> str:
    return state_path(f"{events_prefix(batch)}/{_segment('event-id', event_id)}.json")


def lane_closed_event_id(lane: str) -> str:
    """Deterministic per-lane reservation id: stable within the batch."""
    return "lane_closed-" + hashlib.sha256(lane_name(lane).encode("utf-8")).hexdigest()[:16]


def workspace_id(value: object) -> str:
    return _segment("workspace", value)


def admission_prefix(family: str, workspace: str) -> str:
    """The directory of one workspace's records of an admission family."""
    assert family in ADMISSION_FAMILIES
    return f"{family}/{workspace_id(workspace)}"


def admission_path(family: str, workspace: str, *keys: str) -> str:
    """`<family>/<workspace>/<key>/.../<last>.json`. Keys are canonical ids or lane refs,
    already inside the segment grammar, so they are used as they are (docs/compat.md
    "Admission record paths": no percent-encoding)."""
    segments = [_segment(f"{family} key", key) for key in keys]
    return state_path(f"{admission_prefix(family, workspace)}/{'/'.join(segments)}.json")


def archive_path(path: str) -> str:
    return state_path(f"{ARCHIVE}/{state_path(path)}")
