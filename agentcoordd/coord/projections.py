"""How records appear in `status --json`: one projection per record family.

Key sets match the existing tool (../shared/conformance/golden):

* claim: path, repo, target, status, agent_id, branch ("UNKNOWN" when
  absent), expires_at, plus the claim metadata present on the record;
* heartbeat: path, agent_id, status, liveness, target ("repo#target", "-"
  when neither is set), updated_at, plus the heartbeat metadata present;
* batch: the manifest without schema_version, plus path, with each lane
  projected (name, owner, targets, status, liveness, deps, blocked_on, plus
  the lane metadata present); declared lane terminal state wins over the
  heartbeat, which wins over the manifest's planned lane status;
* event: the record without schema_version, plus path;
* archive envelope (`--include-archived`): path, record_family, source_path(s),
  reason, synthetic, archived_at, delete_after (agent-coord's row).

Missing facts are shown as UNKNOWN / unknown, never guessed.

The *digest* functions are what `store.cache.scan` keeps per record; they
raise `Malformed` for a record that is not a JSON object.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentcoordd.coord import holders
from agentcoordd.coord.batches import lane_dependencies, lane_name_of, lane_owner_of, lane_targets_of
from agentcoordd.model.foundation import route as route_contract
from agentcoordd.model.foundation import usage as usage_contract
from agentcoordd.model.liveness import liveness_of
from agentcoordd.model.records import Metadata
from agentcoordd.model.status import satisfies_dependency
from agentcoordd.model.timefmt import parse_ts
from agentcoordd.store.cache import Malformed

UNKNOWN = "UNKNOWN"
_NO_TIME = float("-inf")

# Optional fields status projects when present: the caller's metadata options
# (one list, the Metadata Struct) plus the attribution tuple and each family's own.
_OPTIONS = (*Metadata.__struct_fields__, "machine_id", "session_id", "session_source")
CLAIM_METADATA = frozenset((
    *_OPTIONS, "batch_id", "release_mode", "handoff_to", "handoff_note", "terminal", "pr_state",
    "evidence_url", "workspace", "closed_by",
    # ours (docs/compat.md): the grant's token and how it began
    "fencing_token", "previous_holder", "takeover_reason",
))
HEARTBEAT_METADATA = frozenset((*_OPTIONS, "batch_id", "branch", "status_raw"))
LANE_METADATA = frozenset((
    "thread_handle",
    "chat_handle",
    "host",
    "pr_url",
    "dashboard_url",
    "operator",
    "phase",
    "branch",
    "terminal",
    "closed_at",
    "closed_by",
    "pr_state",
    "evidence_url",
    "pool",  # ours: a pool lane (docs/contracts.md#pool-lanes-and-priority)
))


def _object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    return data


def _metadata(data: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """The listed fields present (and not null) on the record, in record order."""
    return {k: v for k, v in data.items() if k in fields and v is not None}


def _text(value: Any, default: str = UNKNOWN) -> Any:
    return default if value is None else value


# ---- claims --------------------------------------------------------------


def claim_projection(path: str, data: Any) -> dict[str, Any]:
    data = _object(data)
    parts = path.split("/")  # claims/<owner>/<repo>/<target>.json
    repo = "/".join(parts[1:3]) if len(parts) == 4 else UNKNOWN
    target = parts[-1].removesuffix(".json")
    return {
        "path": path,
        "repo": _text(data.get("repo"), repo),
        "target": _text(data.get("target"), target),
        "status": _text(data.get("status"), "unknown"),
        "agent_id": _text(data.get("agent_id")),
        "branch": _text(data.get("branch")),
        "expires_at": _text(data.get("expires_at")),
        **_metadata(data, CLAIM_METADATA),
    }


def claim_digest(path: str, data: Any) -> tuple[dict[str, Any], Any]:
    """A claim's status projection and what the lane rows read of it (holders.LeaseClaim)."""
    return claim_projection(path, data), holders.LeaseClaim.of(data)


def lease_claim_digest(path: str, data: Any) -> Any:
    """What a lane row reads of its lease's claim (holders.LeaseClaim or UNREADABLE)."""
    return holders.LeaseClaim.of(data)


# ---- heartbeats ----------------------------------------------------------


class HeartbeatView:
    """A heartbeat digest: the time-independent projection plus what lanes need.

    Cached across status calls by a CachingStore, so its timestamps are parsed
    once; liveness is derived per call from the caller's `now`.
    """

    __slots__ = ("head", "meta", "updated_at", "expires_at", "status", "agent_id", "mismatched", "about",
                 "_times", "_memo")

    def __init__(self, path: str, data: Any) -> None:
        data = _object(data)
        file_agent = path.rsplit("/", 1)[-1].removesuffix(".json")
        agent = data.get("agent_id")
        self.agent_id = file_agent if agent is None else agent
        self.mismatched = agent is not None and agent != file_agent
        self.status = _text(data.get("status"), "unknown")
        self.updated_at = data.get("updated_at")
        self.expires_at = data.get("expires_at")
        self._times = (parse_ts(self.updated_at), parse_ts(self.expires_at))
        self._memo: tuple[dt.datetime, str] | None = None
        repo, target = data.get("repo"), data.get("target")
        self.about = (str(repo), str(target)) if repo is not None and target is not None else None
        shown = "#".join(str(v) for v in (repo, target) if v is not None) or "-"
        self.head = (path, self.agent_id, self.status, shown, _text(self.updated_at))
        self.meta = _metadata(data, HEARTBEAT_METADATA)

    def liveness(self, now: dt.datetime) -> str:
        memo = self._memo
        if memo is not None and memo[0] == now:
            return memo[1]
        value = liveness_of(*self._times, now)
        self._memo = (now, value)
        return value

    def is_about(self, repo: str, target: str) -> bool:
        """Whether this heartbeat reports work on repo#target."""
        return self.about == (repo, target)

    def projection(self, now: dt.datetime) -> dict[str, Any]:
        path, agent, status, target, updated = self.head
        return {
            "path": path,
            "agent_id": agent,
            "status": status,
            "liveness": self.liveness(now),
            "target": target,
            "updated_at": updated,
            **self.meta,
        }


def heartbeat_view(path: str, data: Any) -> HeartbeatView:
    return HeartbeatView(path, data)


# ---- events and archive envelopes ---------------------------------------


def event_sort_key(data: dict[str, Any]) -> float:
    """Chronological key for `at` (POSIX seconds); -inf when it is not a time.

    Consumers order mixed event families by `at`, path breaking ties; an
    event without a usable `at` sorts first (it is never the "most recent").
    A float keeps the cached key small and is exact to the microsecond.
    """
    moment = parse_ts(data.get("at"))
    return _NO_TIME if moment is None else moment.timestamp()


def event_key_digest(path: str, data: Any) -> float:
    return event_sort_key(_object(data))


def event_projection(path: str, data: Any) -> dict[str, Any]:
    data = _object(data)
    batch = path.split("/")[1] if path.count("/") >= 2 else UNKNOWN
    out: dict[str, Any] = {"path": path}
    for key, value in data.items():
        if key != "schema_version" and value is not None:
            out[key] = value
    out.setdefault("batch_id", batch)
    out.setdefault("type", "unknown")
    out.setdefault("at", UNKNOWN)
    return out


def event_status_digest(path: str, data: Any) -> tuple[float, dict[str, Any]]:
    """For scoped reads: sort key and projection together."""
    projection = event_projection(path, data)
    return event_sort_key(data), projection


# An archive row: these keys, each defaulted only when the record lacks it (an
# explicit null is dropped), as agent-coord shows them.
_ARCHIVE_ROW = (("record_family", "unknown"), ("source_path", None), ("source_paths", None),
                ("reason", "unknown"), ("synthetic", False), ("archived_at", "UNKNOWN"),
                ("delete_after", "UNKNOWN"))


def archive_projection(path: str, data: Any) -> dict[str, Any]:
    data = _object(data)
    out: dict[str, Any] = {"path": path}
    for key, default in _ARCHIVE_ROW:
        value = data.get(key, default)
        if value is not None:
            out[key] = value
    return out


# ---- batches and lanes ---------------------------------------------------


class BatchView:
    """A batch manifest with what status shows of it worked out once per record
    (the digest a cached scan keeps): per lane its owner, name, targets, deps and
    metadata; what depends on heartbeats and the time is left to each call."""

    __slots__ = ("bad_names", "batch_id", "extra", "lanes", "malformed", "state_keys")

    def __init__(self, path: str, data: dict[str, Any]) -> None:
        self.batch_id = batch_id_of(path, data)
        raw = data.get("lanes")
        lanes = raw if isinstance(raw, list) else []
        # (lane, owner, name, targets, deps, metadata) of each object lane
        self.lanes: list[tuple[dict[str, Any], str, str, list[str], list[str], dict[str, Any]]] = []
        self.malformed: list[int] = []  # 1-based positions of non-object lane entries
        self.state_keys: list[tuple[str, dict[str, Any], str]] = []  # ("batch:lane", lane, owner)
        for position, lane in enumerate(lanes, start=1):
            name = lane_name_of(lane)
            owner = lane_owner_of(lane) or UNKNOWN
            if name is not None and ":" not in name:
                self.state_keys.append((f"{self.batch_id}:{name}", lane, owner))
            if not isinstance(lane, dict):
                self.malformed.append(position)
                continue
            self.lanes.append((lane, owner, name or UNKNOWN, lane_targets_of(lane), lane_dependencies(lane),
                               _metadata(lane, LANE_METADATA)))
        self.bad_names = malformed_lane_names(lanes)
        self.extra = {k: v for k, v in data.items()
                      if k not in ("schema_version", "batch_id", "lanes") and v is not None}

    def lane_states(self, heartbeats: dict[str, Any]) -> dict[str, str]:
        """`batch:lane` -> lane status, for dependency checks (malformed lanes skipped)."""
        return {key: lane_status(lane, heartbeats.get(owner)) for key, lane, owner in self.state_keys}


def batch_digest(path: str, data: Any) -> BatchView:
    return BatchView(path, _object(data))


def batch_id_of(path: str, data: dict[str, Any]) -> str:
    value = data.get("batch_id")
    return value if isinstance(value, str) and value else path.rsplit("/", 1)[-1].removesuffix(".json")


# What a lane's owner heartbeat resolved to: a view, or one of these markers.
HB_MISSING = None
HB_UNREADABLE = "unreadable"  # torn or not an object: noted, status still answers (agent-coord)
HB_FORBIDDEN = "forbidden"  # outside the token's scope: the answer is UNKNOWN
HB_MISMATCHED = "mismatched"


def lane_status(lane: dict[str, Any], heartbeat: Any) -> str:
    """Declared terminal wins, then the owner's heartbeat, then the planned status."""
    terminal = lane.get("terminal")
    if terminal is not None:
        return str(terminal)
    if isinstance(heartbeat, HeartbeatView):
        return str(heartbeat.status)
    planned = lane.get("status")
    return "unknown" if planned is None else str(planned)


def lane_liveness(heartbeat: Any, now: dt.datetime) -> str:
    if isinstance(heartbeat, HeartbeatView):
        return heartbeat.liveness(now)
    if heartbeat in (HB_UNREADABLE, HB_FORBIDDEN):
        return "unreadable"
    if heartbeat == HB_MISMATCHED:
        return "mismatched"
    return "no-heartbeat"


def batch_projection(
    path: str, view: BatchView, heartbeats: dict[str, Any], lane_states: dict[str, str],
    now: dt.datetime, claims: dict[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    """The projected batch: each lane's status, liveness and blocked deps as of `now`.
    With `claims` ((repo, target) -> holders.LeaseClaim of the claims read), each lane
    also says who holds it (coord/holders.py); `heartbeats` then has the holders' too."""
    projected = []
    repo = view.extra.get("repo")
    for lane, owner, name, targets, deps, meta in view.lanes:
        heartbeat = heartbeats.get(owner)
        blocked_on = [dep for dep in deps if not satisfies_dependency(lane_states.get(dep))]
        row = {
            "name": name,
            "owner": owner,
            "targets": targets,
            "status": lane_status(lane, heartbeat),
            "liveness": lane_liveness(heartbeat, now),
            "deps": deps,
            "blocked_on": blocked_on,
            **meta,
        }
        chip = route_contract.chip_text(lane.get("route"))  # the route chip, canonical form
        if chip is not None:
            row["route"] = chip
        if claims is not None:
            where = holders.lease_target(repo, targets)
            claim = claims.get(where) if where is not None else None
            holder = claim.agent_id if isinstance(claim, holders.LeaseClaim) else None
            told = holders.lane_view(lane, blocked_on=blocked_on, where=where, claim=claim,
                                     owner_beat=heartbeat, beat=heartbeats.get(holder), now=now)
            row.update(told, **holders.pool_fields(lane, told))
        projected.append(row)
    usage = usage_contract.tiles(view.extra.get("usage"))  # ours: the usage tiles (additive)
    return {"path": path, "batch_id": view.batch_id, "lanes": projected, **view.extra,
            **({"usage_totals": usage} if usage is not None else {})}


def malformed_lane_names(lanes: Any) -> list[str]:
    return [
        name
        for lane in (lanes if isinstance(lanes, list) else [])
        if (name := lane_name_of(lane)) is not None and ":" in name
    ]
