"""Ordinary events: explicit record-event and the auto-emitted lifecycle events."""

from __future__ import annotations

from typing import Any

from agentcoordd.coord import closeout, lease
from agentcoordd.coord.common import metadata_fields, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import SCHEMA_VERSION, Event, Metadata, load
from agentcoordd.model.status import normalize_status
from agentcoordd.model.timefmt import format_ts, new_event_id
from agentcoordd.model import typed_events
from agentcoordd.model.typed_events import ANSWER_TYPES, TYPED_EVENTS, TYPED_FIELDS
from agentcoordd.model.validation import contract_error
from agentcoordd.store.base import Conflict

_ID_ATTEMPTS = 5


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def typed_payload(event_type: str, typed: dict[str, str], message: str | None) -> dict[str, str]:
    """Validate typed fields strictly for the four typed types; pass others through."""
    unknown = set(typed) - set(TYPED_FIELDS)
    if unknown:
        raise UsageError(f"unknown typed event field: {sorted(unknown)[0]}")
    fields = {k: text_field(k, v) for k, v in typed.items() if v is not None}
    present = dict(fields, message=message) if message is not None else fields
    found = typed_events.problems(event_type, present)
    if not found:
        return fields
    kind, name = found[0]  # agent-coord stops at the first, in its words
    if kind == "foreign":
        raise UsageError(f"{_flag(name)} is not valid for --type {event_type}")
    if kind == "missing":
        raise UsageError(f"missing required {_flag(name)}")
    allowed = TYPED_EVENTS[event_type][name] or ()
    raise UsageError(f"{_flag(name)} must be one of: {', '.join(allowed)}")


def build_event(
    ctx: Ctx, batch_id: str, fields: dict[str, Any], *, contract: bool = False,
    event_id: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """A new ordinary event with a fresh time-sortable id (or `event_id`), validated, and
    its path.

    With `contract` (explicit record-event) the record is checked against the
    published event v1 contract: a violation is exit 1 in `validate`'s words.
    """
    moment = ctx.clock.now()
    event_id = event_id or new_event_id(moment)
    record = {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_id,
        "batch_id": batch_id,
        **fields,
        "at": format_ts(moment),
    }
    record = stamp_attribution(record, ctx.identity)
    path = ids.event_path(batch_id, event_id)
    if contract:
        error = contract_error("event", record, "event")
        if error is not None:
            raise error
    load(Event, record, path)
    return path, record


async def write_event(
    ctx: Ctx, batch_id: str, fields: dict[str, Any], *, queue_on_failure: bool = False,
    contract: bool = False, event_id: str | None = None,
) -> dict[str, Any] | None:
    """Append one ordinary event under events/<batch-id>/ with a fresh id.

    With queue_on_failure, an event the store could not take is kept in
    `ctx.undelivered` with its final id and path (the daemon's outbox retries
    it; create-only makes the retry idempotent) before the error propagates.
    With `event_id` (an event whose id says what it is about) an existing record
    there is this very event, written before: None, nothing written.
    """
    for _ in range(_ID_ATTEMPTS):
        path, record = build_event(ctx, batch_id, fields, contract=contract, event_id=event_id)
        try:
            await ctx.store.create(path, record)
        except Conflict:
            if event_id is not None:
                return None  # recorded already (a retry of the same call)
            continue  # an id collision: draw a new random suffix
        except (CoordError, OSError):
            if queue_on_failure:
                ctx.undelivered.append((path, record))
            raise
        ctx.written.append((path, record))
        return {"path": path, "event": record}
    raise UsageError("could not allocate a unique event id")  # pragma: no cover


async def emit(ctx: Ctx, batch_id: str | None, event_type: str, fields: dict[str, Any], *,
               event_id: str | None = None) -> dict | None:
    """Best-effort lifecycle event: a failure warns (and queues) but never fails the command.
    `event_id`: written once whoever emits it (write_event)."""
    if not batch_id:
        return None
    try:  # an unusable batch id too (agent-coord stores what it was given and warns here)
        return await write_event(ctx, batch_id, {"type": event_type, **fields},
                                 queue_on_failure=True, event_id=event_id)
    except CoordError as exc:
        reason = exc.message
    except OSError as exc:
        reason = str(exc)
    ctx.warn(f"{event_type} event not recorded: {reason}")
    return None


async def record_event(
    ctx: Ctx,
    *,
    batch_id: str,
    type: str,
    lane: str | None = None,
    agent_id: str | None = None,
    repo: str | None = None,
    target: str | None = None,
    branch: str | None = None,
    status: str | None = None,
    message: str | None = None,
    meta: Metadata = Metadata(),
    typed: dict[str, str] | None = None,
    terminal: str | None = None,
    pr_state: str | None = None,
    evidence_url: str | None = None,
    workspace: str | None = None,
    queue_on_failure: bool = False,
    fencing_token: int | None = None,
) -> dict[str, Any]:
    """record-event: append an immutable batch or lane event (with `fencing_token`, only
    while that grant holds repo/target: else exit 3, nothing written).

    With queue_on_failure an event the backend cannot take right now is handed
    to the daemon's durable outbox (action "queued") instead of failing.
    """
    ids.batch_id(batch_id)
    event_type = ids.event_type(text_field("type", type, required=True))
    assert event_type is not None
    meta_fields = metadata_fields(meta)
    for name, value in (("agent_id", agent_id), ("repo", repo), ("target", target),
                        ("branch", branch), ("message", message)):
        text_field(name, value)  # payload, not paths: kept as given (agent-coord)

    if lane is not None:
        ids.event_lane(text_field("lane", lane))
    await lease.check_fencing_token(ctx, repo, target, fencing_token)
    if event_type in ANSWER_TYPES.values():  # only `answer` checks the request it answers
        raise UsageError(f"--type {event_type} is written by `agentcoordctl answer --batch-id "
                         f"{batch_id} --to-event ID --message TEXT`")
    if event_type == "lane_closed":
        if typed and any(v is not None for v in typed.values()):
            raise UsageError("typed event fields do not apply to --type lane_closed")
        return await closeout.record_lane_closed(ctx, {
            "batch_id": batch_id, "lane": lane, "agent_id": agent_id, "repo": repo, "target": target,
            "branch": branch, "terminal": terminal, "pr_state": pr_state,
            "evidence_url": evidence_url, "workspace": workspace,
            **{k: meta_fields[k] for k in ("host", "pr_url", "synthetic", "synthetic_kind")
               if k in meta_fields},
        })
    if terminal is not None or pr_state is not None or evidence_url is not None or workspace is not None:
        raise UsageError("terminal-only options require --type lane_closed")

    fields: dict[str, Any] = {"type": event_type}
    for name, value in (("lane", lane), ("agent_id", agent_id), ("repo", repo), ("target", target), ("branch", branch)):
        if value is not None:
            fields[name] = value
    fields.update(meta_fields)
    if status is not None:
        normalized = normalize_status(text_field("status", status) or status, event_type=event_type)
        fields["status"] = normalized.status
        if normalized.status_raw is not None:
            fields["status_raw"] = normalized.status_raw
        if normalized.warning:
            ctx.warn(normalized.warning)
    if message is not None:
        fields["message"] = message
    fields.update(typed_payload(event_type, typed or {}, message))
    try:
        written = await write_event(ctx, batch_id, fields, queue_on_failure=queue_on_failure,
                                    contract=True)
    except (CoordError, OSError) as exc:
        if not queue_on_failure or not ctx.undelivered or isinstance(exc, UsageError):
            raise
        path, record = ctx.undelivered[-1]
        reason = exc.message if isinstance(exc, CoordError) else str(exc)
        # The daemon queues it before the reply (or says exit 2 why it could not).
        ctx.warn(f"the backend did not take the event: {reason}")
        return {"action": "queued", "path": path, "event": record}
    await _warn_if_unregistered(ctx, batch_id)
    return {"action": "recorded", **written}


async def _warn_if_unregistered(ctx: Ctx, batch_id: str) -> None:
    """An explicit event for a batch nobody registered is kept (agent-coord keeps it),
    with a warning: a mistyped --batch-id otherwise records into nowhere silently."""
    try:
        registered = await ctx.store.get(ids.batch_path(batch_id)) is not None
    except (CoordError, OSError):
        return  # unreadable or out of the token's scope: not known to be missing
    if not registered:
        ctx.warn(f"batch {batch_id} is not registered; event recorded anyway")


def lifecycle_fields(record: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Copy the named fields a lifecycle event carries from a claim/heartbeat."""
    return {n: record[n] for n in names if record.get(n) is not None}

