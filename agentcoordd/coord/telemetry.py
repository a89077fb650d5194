"""Telemetry: batch history (Store events + local JSON Lines), stop requests, QA.

History has two sources, merged into one chronology:

* **Store events** — the ordinary append-only events under
  `events/<batch-id>/<event-id>.json`, on every backend.
* **JSON Lines history** that dashboards and batch runners kept in a *local*
  state root: `events/*.jsonl`, `history/*.jsonl` and
  `events/batches/<batch-id>.jsonl`, one JSON object per line, stamped `at`
  or `timestamp`. They are read **read-only** and only when the selected
  store is a local root (LocalStore / CachingStore); nothing here ever writes
  a `.jsonl` file. A line that is not a JSON object, not UTF-8, or carries no
  usable `at`/`timestamp` is reported as a problem (file + line number) and
  skipped — one bad line never hides the rest and never raises. A file that
  is a symlink, not a regular file, or larger than `MAX_JSONL_BYTES` is
  reported and skipped whole.

Merge order is `(at|timestamp as UTC, event_id, path)`; an event with the
same `(batch_id, event_id)` in both sources is shown once (the Store copy).
Each merged event carries `source` ("store" or "jsonl") and `path`
(`events/<batch>/<id>.json`, or `history/x.jsonl:12` for a JSONL line); a
JSONL event stamped only `timestamp` also gets `at` (the same value) so
readers can sort and render one field, and an event read from
`events/batches/<id>.jsonl` without a `batch_id` gets that file's id.

Writes — the contract's recommended history types (`HISTORY_EVENT_TYPES`)
are ordinary events written through the Store with `record_event`; the
batch stop signals have their own helpers (`request_stop`, `mark_stopped`).
A stop request is an audit/control signal only: it never kills anything and
never touches claims, heartbeats or manifests. (The contract's dashboard
appends `batch.stop_requested` to `events/batches/<id>.jsonl`; we write it as
an ordinary Store event instead so it reaches agents on every backend — the
JSONL form is still read.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agentcoordd.coord import trust
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import record_event, write_event
from agentcoordd.coord.common import text_field
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.timefmt import event_time, parse_ts  # noqa: F401 - event_time: readers' import
from agentcoordd.model.typed_events import ANSWER_TYPES
from agentcoordd.store.base import InvalidRecord, StoreError
from agentcoordd.store.cache import Malformed, Scan, scan
from agentcoordd.store.history import JsonlHistory

# ---- vocabulary ------------------------------------------------------------

STOP_REQUESTED = "batch.stop_requested"
STOPPED = "batch.stopped"
QA_TYPES = {
    "qa.validation_requested": "requested",
    "qa.validation_started": "in_progress",
    "qa.validation_passed": "passed",
    "qa.validation_failed": "failed",
}
HISTORY_EVENT_TYPES = (
    "batch.created",
    "lane.started",
    "heartbeat",
    "token_limit_pause",
    "continued",
    "blocked",
    "ready",
    "done",
    *QA_TYPES,
    STOP_REQUESTED,
    STOPPED,
)
STOP_NOTICE = "agentcoord: batch {batch} has a stop request{detail}: finish the current safe checkpoint, write a final heartbeat/event and stop claiming new work for this batch"



def is_qa_event(event_type: object) -> bool:
    """A QA or validation event (the contract: "a QA or validation event")."""
    return isinstance(event_type, str) and (
        event_type.startswith("qa.") or "validation" in event_type
    )


def qa_state(event_type: object) -> str:
    """requested / in_progress / passed / failed from the type; other QA types: unknown."""
    return QA_TYPES.get(event_type, "unknown") if isinstance(event_type, str) else "unknown"


# ---- ordering ----------------------------------------------------------------


def history_key(event: dict[str, Any]) -> tuple[str, str, str]:
    event_id = event.get("event_id")
    return (event_time(event), event_id if isinstance(event_id, str) else "", str(event.get("path", "")))


# ---- local JSON Lines history ---------------------------------------------------


def local_root(store: Any) -> Path | None:
    """The state root of a local store; None for remote ones."""
    files = store.capabilities.files
    return None if files is None else Path(files.root)


async def jsonl_history(ctx: Ctx, *, batch_id: str | None = None) -> JsonlHistory:
    """The local root's JSON Lines history (read-only); empty for a remote store."""
    files = ctx.store.capabilities.files
    if files is None:
        return JsonlHistory()
    if batch_id is not None:
        ids.batch_id(batch_id)
    return await anyio.to_thread.run_sync(files.jsonl_history, batch_id)


# ---- Store events ---------------------------------------------------------------


def _store_event(path: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    out = {k: v for k, v in data.items() if k != "schema_version" and v is not None}
    if path.count("/") >= 2:
        out.setdefault("batch_id", path.split("/")[1])
    out.setdefault("type", "unknown")
    out.setdefault("at", data.get("timestamp", "UNKNOWN"))
    out["source"] = "store"
    out["path"] = path
    return out


_SIGNAL_FIELDS = ("batch_id", "type", "event_id", "at", "timestamp", "repo", "target", "lane",
                  "agent_id", "status", "message", "pr_url", "machine_id", "operator")


_REQUESTS_AND_ANSWERS = frozenset({*ANSWER_TYPES, *ANSWER_TYPES.values()})


def _signal_digest(path: str, data: Any) -> dict[str, Any]:
    """A small per-event digest: identity and time for all, detail for signals."""
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    kind = data.get("type")
    keep = _SIGNAL_FIELDS if is_qa_event(kind) or (isinstance(kind, str) and kind.startswith("batch.")) else ("batch_id", "type", "event_id", "at", "timestamp")
    if kind in _REQUESTS_AND_ANSWERS:  # health's open requests (coord.answers)
        keep = (*_SIGNAL_FIELDS, "reply_to", "reason", "from_route", "to_route", trust.STAMP_FIELD)
    out = {k: data[k] for k in keep if data.get(k) is not None}
    if path.count("/") >= 2:
        out.setdefault("batch_id", path.split("/")[1])
    out["path"] = path
    out["source"] = "store"
    return out


@dataclass
class History:
    events: list[dict[str, Any]]
    unreadable: list[tuple[str, str]]
    problems: list[dict[str, Any]]
    partial: bool = False
    error: str | None = None


def merge(store_events: list[dict[str, Any]], jsonl_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One chronology by (at|timestamp, event_id, path); store copies win duplicates."""
    seen = {(e.get("batch_id"), e.get("event_id")) for e in store_events if e.get("event_id")}
    merged = list(store_events)
    merged.extend(
        e for e in jsonl_events
        if not e.get("event_id") or (e.get("batch_id"), e.get("event_id")) not in seen
    )
    merged.sort(key=history_key)
    return merged


async def _collect(ctx: Ctx, batch_id: str | None, digest: Any, name: str) -> History:
    prefix = ids.events_prefix(batch_id) if batch_id is not None else "events"
    error = None
    try:
        result: Scan[Any] = await scan(ctx.store, prefix, digest, name)
    except StoreError as exc:
        result, error = Scan(), f"{prefix} not readable: {exc.message}"
    local = await jsonl_history(ctx, batch_id=batch_id)
    jsonl = local.events
    if digest is _signal_digest:
        jsonl = [_signal_digest(e["path"], e) | {"source": "jsonl"} for e in jsonl]
    events = merge([row for _, row in result.rows], jsonl)
    return History(events, list(result.unreadable), local.problems, result.partial, error)


async def history(ctx: Ctx, *, batch_id: str | None = None, limit: int | None = None) -> dict[str, Any]:
    """The merged history (all batches, or one), oldest first; `limit` keeps the newest.

    Payload: events, problems (malformed JSONL lines: file, line, reason),
    unreadable (store records, left out and named), partial, and exit_code (0,
    or 2 when the store listing failed).
    """
    if batch_id is not None:
        ids.batch_id(batch_id)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"--limit must be a non-negative number: {limit}")
    found = await _collect(ctx, batch_id, _store_event, "telemetry.history")
    events = found.events
    omitted = 0
    if limit is not None and len(events) > limit:
        omitted = len(events) - limit
        events = events[omitted:] if limit else []
    for problem in found.problems:
        ctx.warn(_problem_text(problem))
    unknown = found.error is not None
    return {
        "scope": {"kind": "batch", "batch_id": batch_id} if batch_id else {"kind": "all"},
        "events": events,
        "omitted": omitted,
        "problems": found.problems,
        "unreadable": [{"path": p, "reason": r} for p, r in found.unreadable],
        "partial": found.partial,
        "error": found.error,
        "exit_code": 2 if unknown else 0,
    }


async def signal_events(ctx: Ctx, *, batch_id: str | None = None) -> History:
    """Every event as a small digest (full detail for qa.* and batch.* events), merged."""
    return await _collect(ctx, batch_id, _signal_digest, "telemetry.signals")


def _problem_text(problem: dict[str, Any]) -> str:
    where = problem["file"] + (f":{problem['line']}" if "line" in problem else "")
    return f"history {where}: {problem['reason']} (skipped)"


# ---- QA ------------------------------------------------------------------------


def latest_qa(events: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(repo, target) -> the latest QA event for it (events already in history order)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        if not is_qa_event(event.get("type")):
            continue
        repo, target = event.get("repo"), event.get("target")
        if isinstance(repo, str) and target is not None:
            out[(repo, str(target))] = event
    return out


def qa_view(event: dict[str, Any] | None) -> dict[str, Any]:
    """The displayed QA status: missing without an event, else from the latest one."""
    if event is None:
        return {"qa": "missing"}
    view = {"qa": qa_state(event.get("type")), "qa_event": event.get("type"), "qa_at": event.get("at") or event.get("timestamp")}
    if event.get("message"):
        view["qa_message"] = event["message"]
    return view


# ---- stop requests ----------------------------------------------------------------


def stop_summary(events: list[dict[str, Any]], batch_id: str) -> dict[str, Any]:
    """A batch's stop state from its events (in history order)."""
    state: dict[str, Any] = {"batch_id": batch_id, "stop_requested": False, "stopped": False}
    for event in events:
        if event.get("batch_id") != batch_id:
            continue
        kind = event.get("type")
        if kind == STOP_REQUESTED:
            state.update(stop_requested=True, requested_at=event.get("at") or event.get("timestamp"))
            state["message"] = event.get("message")
            if event.get("machine_id"):
                state["requested_by_machine"] = event["machine_id"]
        elif kind == STOPPED:
            state.update(stopped=True, stopped_at=event.get("at") or event.get("timestamp"))
    return {k: v for k, v in state.items() if v is not None}


# Not a stop signal. Not None: a scan drops None digests from its cache (they are
# neither rows nor unreadable), which made every stop check re-read every event.
_NOT_A_STOP: dict[str, Any] = {}


def _stop_digest(path: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    if data.get("type") not in (STOP_REQUESTED, STOPPED):
        return _NOT_A_STOP
    return {k: data[k] for k in ("batch_id", "type", "event_id", "at", "timestamp", "message", "machine_id") if data.get(k) is not None} | {"path": path}


async def stop_state(ctx: Ctx, batch_id: str) -> dict[str, Any]:
    """stop_requested / stopped (+ requested_at, message, stopped_at) of one batch.

    Cheap: lists `events/<batch>/` only (digests cached by a CachingStore) and,
    on a local root, the one file `events/batches/<batch>.jsonl`. An
    unreadable record or listing is not a stop request (reported as `error`).
    """
    ids.batch_id(batch_id)
    error = None
    try:
        found = await scan(ctx.store, ids.events_prefix(batch_id), _stop_digest, "telemetry.stop")
        rows = [row for _, row in found.rows if row]
    except StoreError as exc:
        rows, error = [], exc.message
    files = ctx.store.capabilities.files
    if files is not None:
        events = await anyio.to_thread.run_sync(files.jsonl_batch_file, batch_id)
        rows.extend(e for e in events if e.get("type") in (STOP_REQUESTED, STOPPED))
    # Cached digests are shared: copy, never mutate.
    rows = [row if "batch_id" in row else {**row, "batch_id": batch_id} for row in rows]
    rows.sort(key=history_key)
    state = stop_summary(rows, batch_id)
    if error:
        state["error"] = error
    return state


async def stop_requested(ctx: Ctx, batch_id: str) -> bool:
    """True when a batch.stop_requested event exists for the batch (see stop_state)."""
    return bool((await stop_state(ctx, batch_id))["stop_requested"])


def stop_notice(state: dict[str, Any]) -> str | None:
    """The one-line stderr notice for a ctl call on a lane of a stop-requested batch."""
    if not state.get("stop_requested"):
        return None
    message = state.get("message")
    detail = f" ({message})" if message else ""
    if state.get("requested_at"):
        detail = f" at {state['requested_at']}{detail}"
    return STOP_NOTICE.format(batch=state["batch_id"], detail=detail)


async def _batch_repo(ctx: Ctx, batch_id: str) -> str | None:
    try:
        current = await ctx.store.get(ids.batch_path(batch_id))
    except (InvalidRecord, StoreError):
        return None
    if current is None or not isinstance(current.data, dict):
        return None
    repo = current.data.get("repo")
    return repo if isinstance(repo, str) and repo else None


async def _batch_signal(ctx: Ctx, batch_id: str, event_type: str, status: str,
                        message: str | None) -> dict[str, Any]:
    ids.batch_id(batch_id)
    text_field("message", message)
    fields: dict[str, Any] = {"type": event_type, "status": status}
    repo = await _batch_repo(ctx, batch_id)
    if repo is not None:
        fields["repo"] = repo
    else:
        ctx.warn(f"batch {batch_id} has no readable retained manifest; recording {event_type} anyway")
    if message is not None:
        fields["message"] = message
    written = await write_event(ctx, batch_id, fields)
    return {"action": "recorded", "batch_id": batch_id, **written}


async def request_stop(ctx: Ctx, *, batch_id: str, message: str | None = None) -> dict[str, Any]:
    """`batch stop`: append batch.stop_requested (status stop_requested). Nothing else."""
    return await _batch_signal(ctx, batch_id, STOP_REQUESTED, "stop_requested", message)


async def mark_stopped(ctx: Ctx, *, batch_id: str, message: str | None = None) -> dict[str, Any]:
    """`batch stopped`: append batch.stopped (status stopped). Nothing else."""
    return await _batch_signal(ctx, batch_id, STOPPED, "stopped", message)


async def record_history_event(ctx: Ctx, *, batch_id: str, type: str, **kwargs: Any) -> dict[str, Any]:
    """One of the contract's recommended history types, as an ordinary Store event.

    `kwargs` are `record_event`'s (lane, agent_id, repo, target, branch,
    status, message, meta). Other types go through `record_event` directly.
    """
    if type not in HISTORY_EVENT_TYPES:
        raise UsageError(
            f"not a recommended history event type: {type} (one of {', '.join(HISTORY_EVENT_TYPES)})"
        )
    if type in (STOP_REQUESTED, STOPPED):
        helper = request_stop if type == STOP_REQUESTED else mark_stopped
        extra = set(kwargs) - {"message"}
        if extra:
            raise UsageError(f"{type} takes only --message (got {', '.join(sorted(extra))})")
        return await helper(ctx, batch_id=batch_id, message=kwargs.get("message"))
    return await record_event(ctx, batch_id=batch_id, type=type, **kwargs)


async def wait_until_stop_requested(
    ctx: Ctx, batch_id: str, *, poll_seconds: float = 5.0, timeout: float | None = None,
    sleep: Any = anyio.sleep,
) -> dict[str, Any]:
    """`wait --until-stop-requested`: poll stop_state until a request appears.

    Returns the stop state plus exit_code 0, or exit_code 2 with
    `timed_out: true` when `timeout` seconds of polling passed first.
    """
    from agentcoordd.coord.waits import poll_until

    ids.batch_id(batch_id)

    async def check() -> tuple[bool, dict[str, Any]]:
        state = await stop_state(ctx, batch_id)
        if state["stop_requested"]:
            return True, state
        return False, {**state, "detail": f"no stop request for batch {batch_id} yet"}

    return await poll_until(check, poll_seconds=poll_seconds, timeout=timeout, sleep=sleep,
                            batch=(ctx, batch_id))

