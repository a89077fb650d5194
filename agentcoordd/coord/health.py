"""health: the telemetry contract's Dashboard Health Signals, plus QA per PR.

Returns the `health --json` payload and one extra key, **`exit_code`** (as
status and batch-audit do; the daemon pops it): 0 when no signal fired, 1
when any warning did, 2 when the state could not be read (a family listing
failed, or in batch scope the batch's manifest — everything readable is still
reported). One record that cannot be read is a warning, not a failure.

Signals (each warning: `signal`, `message`, and the `path` / `batch_id` /
`lane` / `repo` / `target` / `agent_id` it is about). The contract calls
them telemetry bugs of the batch runner or worker prompt:

* `missing_machine_identity` — a claim or heartbeat with none of
  `machine_id`, `machine`, `hostname` (`host` is the app surface and does
  not count);
* `claim_without_heartbeat` — an active claim (status not `released`, no
  declared terminal, `expires_at` not passed) claimed more than
  the first heartbeat's grace (300 s, `--first-heartbeat-grace`) ago
  whose holder has no heartbeat, or whose holder's heartbeat names another
  repo/target (a heartbeat that names no target matches any of its holder's
  claims);
* `missing_batch_manifest` — a claim or heartbeat naming a `batch_id` with no
  `batches/<id>.json`;
* `manifest_without_launch_prompt` — a retained manifest without a non-empty
  `launch_prompt`;
* `launch_prompt_target_drift` — the targets the launch prompt names (read as
  `agentcoordd.coord.prompt` documents: GitHub pull/issue URLs of the batch
  repo, `#N`, and `PR`/`issue`/`target` keyword lists; targets on reserve /
  defer lines or in a `Reservations:` section are reservations) differ from
  the manifest's (its `targets` entries plus every lane's targets, with its
  `reservations` apart): `prompt_only` / `manifest_only` list the difference;
  a prompt that has workers take lanes with `claim --next` (or the MCP
  `claim_next` tool) need not list the manifest's targets (no `manifest_only`);
* `lane_without_heartbeat` — an owned lane nobody holds (its `lane_state`,
  coord/holders.py: not closed, held, stale or dead holder) whose owner has no
  heartbeat record; never a pool lane (its owner only names the pool), nor a
  lane of a batch registered within the first heartbeat's grace;
* `stale_holder` / `dead_holder` (ours) — a lane whose holder (its lease's
  claim) is stale, or dead under the lease rules (the lane may be taken over):
  `agent_id`, `lane`, `liveness`, `since` (claimed_at) and `age_seconds` since
  the holder's last heartbeat (its claim when it has none);
* `batch_without_history` — a manifest with no event for its batch, neither
  in the Store (`events/<id>/`) nor in local JSONL history;
* `malformed_history_line` — a JSONL history line (or file) that was skipped;
* `request_unanswered` — a help_requested / escalation_requested event without
  an answer (coord.answers) for longer than `unanswered_after` seconds
  (default 30 minutes, `health --unanswered-after`). Every open request, with
  its age, is listed in `open_requests` whatever its age (additive keys).
* `clock_offset` (ours) — on a remote backend, this machine's clock is further
  from the backend's than the lease policy allows, so takeovers are refused
  (coord/lease.py); `clock` carries the measured offset either way.
* `batch_blocked` (ours) — a batch whose supervisor blocked it on operator
  authority (`batch block`): its `blocker` (message, decisions,
  recommendedReply) until `batch unblock` resolves it;
* `unreadable_record` (ours, additive) — a record no reader can read (not
  JSON, outside the record bounds of model.bounds, not an object): named, and
  left out of every other check; also listed in `unreadable`.

QA (`qa`, one row per PR; informational, never changes the exit code): the
PRs are the manifests' `pull_request` targets and lane `pr_url`s, the
`pr_url`s of claims and heartbeats, and every repo/target a QA event names.
Each row's `qa` is `missing` without a QA/validation event for that
repo/target, else from the latest one (by `at|timestamp`, `event_id`):
`requested`, `in_progress`, `passed`, `failed`, or `unknown` for another
`qa.*`/validation type.

Scope: everything, or with `batch_id` that batch's manifest and events, the
claims and heartbeats naming it, and its lane owners' heartbeats.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from agentcoordd.coord import holders, host_limits
from agentcoordd.coord import projections as pj
from agentcoordd.coord import prompt as prompt_reader
from agentcoordd.coord import telemetry
from agentcoordd.coord.open_requests import open_requests
from agentcoordd.coord.batches import lane_name_of, lane_owner_of, lane_targets_of
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.info import CONTRACT_VERSION
from agentcoordd.coord.lease import clock_report
from agentcoordd.model import ids
from agentcoordd.model.errors import EXIT_OK, EXIT_OPERATIONAL, UsageError
from agentcoordd.model.timefmt import format_ts, parse_ts
from agentcoordd.store.base import Forbidden, StoreError
from agentcoordd.store.cache import Malformed, Scan, scan

EXIT_WARNINGS = 1
SIGNALS = (
    "missing_machine_identity",
    "claim_without_heartbeat",
    "missing_batch_manifest",
    "manifest_without_launch_prompt",
    "launch_prompt_target_drift",
    "lane_without_heartbeat",
    "stale_holder",  # ours: a lane's holder whose heartbeat is stale (coord/holders.py)
    "dead_holder",  # ours: a lane's holder that is dead under the lease rules
    "batch_without_history",
    "malformed_history_line",
    "request_unanswered",
    "clock_offset",
    "unreadable_record",  # ours: a record no reader can read (model.bounds, invalid JSON)
    "batch_blocked",  # ours: a batch blocked on operator authority (coord/blockers.py)
)
DEFAULT_UNANSWERED_AFTER = 1800.0
MACHINE_FIELDS = ("machine_id", "machine", "hostname")
_CLAIM_NEXT = re.compile(r"\bclaim\s+--next\b|\bclaim_next\b")
_PR_URL = re.compile(r"github\.com/([^/\s]+)/([^/\s]+)/pull/(\d+)", re.IGNORECASE)
_KEEP = ("agent_id", "repo", "target", "batch_id", "status", "terminal", "expires_at",
         "updated_at", "claimed_at", "fencing_token", "phase", "pr_url", "branch", *MACHINE_FIELDS)
# The normal gap between a claim and its holder's first heartbeat about it (an agent
# heartbeats after its first step; keep-alive at once): no claim_without_heartbeat,
# no lane_without_heartbeat for a lane claimed this recently (docs/health.md).
FIRST_HEARTBEAT_GRACE = 300.0


def _digest(path: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    return {k: data[k] for k in _KEEP if data.get(k) is not None}


def _manifest(path: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    return data


def has_machine_identity(record: dict[str, Any]) -> bool:
    return any(isinstance(record.get(k), str) and record[k].strip() for k in MACHINE_FIELDS)


def pr_of(url: object) -> tuple[str, str] | None:
    """(owner/repo, number) of a GitHub pull request URL."""
    if not isinstance(url, str):
        return None
    match = _PR_URL.search(url)
    return (f"{match.group(1)}/{match.group(2)}", match.group(3)) if match else None


def prompt_drift(manifest: dict[str, Any]) -> dict[str, list[str]] | None:
    """{prompt_only, manifest_only} when the launch prompt's targets drift, else None."""
    text = manifest.get("launch_prompt")
    if not isinstance(text, str) or not text.strip():
        return None
    repo = manifest.get("repo") if isinstance(manifest.get("repo"), str) else None
    mentions = prompt_reader.prompt_targets(text, repo)
    declared, reserved = prompt_reader.manifest_targets(manifest)
    said = set(mentions.active)
    prompt_only = sorted(said - declared - reserved, key=_num)
    manifest_only = [] if assigns_by_claim_next(text) else \
        sorted(declared - said - set(mentions.reserved), key=_num)
    if not prompt_only and not manifest_only:
        return None
    return {"prompt_only": prompt_only, "manifest_only": manifest_only}


def assigns_by_claim_next(prompt: str) -> bool:
    """A prompt that has workers take lanes with `claim --next` (or the MCP `claim_next`
    tool) need not list the manifest's targets: the manifest assigns them."""
    return _CLAIM_NEXT.search(prompt) is not None


def _num(value: str) -> tuple[int, str]:
    return (int(value), value) if value.isdigit() else (1 << 62, value)


def _active_claim(claim: dict[str, Any], now_text: str) -> bool:
    if claim.get("status") == "released" or claim.get("terminal") is not None:
        return False
    expires = parse_ts(claim.get("expires_at"))
    return expires is None or format_ts(expires) > now_text


def _recent(stamp: Any, now: dt.datetime, grace: float) -> bool:
    """Within the first heartbeat's grace of `now` (a claim or a batch just made)."""
    at = parse_ts(stamp)
    return at is not None and (now - at).total_seconds() < grace


class _Lanes:
    """Each manifest lane told from its own claim (coord/holders.py): `stale_holder` and
    `dead_holder` for a holder in trouble, `lane_without_heartbeat` for an owned lane nobody
    holds whose owner has never heartbeat (not a pool lane: its owner only names the
    pool; not in a batch registered within the first heartbeat's grace)."""

    def __init__(self, claims: list[tuple[str, dict[str, Any]]],
                 beats: list[tuple[str, dict[str, Any]]], heartbeat_agents: set[str],
                 now: dt.datetime, grace: float) -> None:
        self.now = now
        self.grace = grace
        self.heartbeat_agents = heartbeat_agents
        self.leases = {(str(c.get("repo")), str(c.get("target"))): (p, holders.LeaseClaim.of(c))
                       for p, c in claims}
        self.views = {p.rsplit("/", 1)[-1].removesuffix(".json"): pj.HeartbeatView(p, b)
                      for p, b in beats}

    def check(self, report: _Report, path: str, own: str, manifest: dict[str, Any]) -> None:
        raw = manifest.get("lanes")
        for lane in raw if isinstance(raw, list) else []:
            if not isinstance(lane, dict):
                continue
            name = lane_name_of(lane) or "?"
            owner = lane_owner_of(lane)
            where = holders.lease_target(manifest.get("repo"), lane_targets_of(lane))
            claim_path, claim = self.leases.get(where, (None, None)) if where else (None, None)
            held = claim if isinstance(claim, holders.LeaseClaim) else None
            told = holders.lane_view(
                lane, blocked_on=[], where=where, claim=claim, owner_beat=self.views.get(owner),
                beat=self.views.get(held.agent_id) if held is not None else None, now=self.now)
            state = told["lane_state"]
            if state in holders.TROUBLED:
                self._troubled(report, state, told["holder"], held, own, name, claim_path)
            elif state in (holders.CLOSED, holders.HELD) or holders.is_pool(lane) or \
                    _recent(manifest.get("registered_at") or manifest.get("created_at"), self.now, self.grace):
                continue
            elif owner is None or owner not in self.heartbeat_agents:
                report.warn("lane_without_heartbeat",
                            f"batch {own} lane {name}: owner {owner or '(none)'} has no heartbeat",
                            path=path, batch_id=own, lane=name, agent_id=owner)

    def _troubled(self, report: _Report, state: str, holder: dict[str, Any],
                  held: holders.LeaseClaim | None, own: str, name: str, path: str | None) -> None:
        agent = holder["agent_id"]
        beat = self.views.get(agent)
        last = parse_ts(beat.updated_at) if beat is not None else None
        last = last or parse_ts(held.claimed_at if held is not None else None)
        age = round((self.now - last).total_seconds(), 3) if last is not None else None
        since = f" for {int(age)}s" if age is not None else ""
        verdict = ("is stale: it may be stuck (it still holds the lane)" if state == holders.STALE_HOLDER
                   else "is dead: the lane may be taken over (claim --next, takeover)")
        report.warn(state, f"batch {own} lane {name}: holder {agent} {verdict}; "
                           f"{holder['detail']}{since}",
                    path=path, batch_id=own, lane=name, agent_id=agent, age_seconds=age,
                    liveness=holder["liveness"], since=holder.get("since"))


class _Report:
    def __init__(self) -> None:
        self.warnings: list[dict[str, Any]] = []
        self.unreadable: list[dict[str, str]] = []
        self.errors: list[str] = []
        self.partial: list[str] = []

    def warn(self, signal: str, message: str, **about: Any) -> None:
        self.warnings.append({"signal": signal, "message": message,
                              **{k: v for k, v in about.items() if v is not None}})

    async def scan(self, ctx: Ctx, prefix: str, digest: Any, name: str) -> Scan[Any]:
        try:
            result = await scan(ctx.store, prefix, digest, name)
        except StoreError as exc:
            self.errors.append(f"{prefix} not readable: {exc.message}")
            return Scan()
        self.unreadable.extend({"path": p, "reason": r} for p, r in result.unreadable)
        if result.partial:
            self.partial.append(prefix)
        return result


async def health(ctx: Ctx, *, batch_id: str | None = None, unanswered_after: float | None = None,
                 first_heartbeat_grace: float | None = None) -> dict[str, Any]:
    if batch_id is not None:
        ids.batch_id(batch_id)
    threshold = DEFAULT_UNANSWERED_AFTER if unanswered_after is None else unanswered_after
    if not threshold >= 0:
        raise UsageError(f"--unanswered-after must not be negative: {unanswered_after}")
    grace = FIRST_HEARTBEAT_GRACE if first_heartbeat_grace is None else first_heartbeat_grace
    if not grace >= 0:
        raise UsageError(f"--first-heartbeat-grace must not be negative: {first_heartbeat_grace}")
    now = ctx.clock.now()
    now_text = format_ts(now)
    report = _Report()
    claims = await report.scan(ctx, "claims", _digest, "health.claims")
    beats = await report.scan(ctx, "heartbeats", _digest, "health.heartbeats")
    if batch_id is None:
        manifests = await report.scan(ctx, "batches", _manifest, "health.batches")
        batch_rows = manifests.rows
        batch_paths = {path for path, _ in batch_rows} | {p["path"] for p in report.unreadable if p["path"].startswith("batches/")}
    else:
        path = ids.batch_path(batch_id)
        batch_rows = []
        batch_paths = set()
        try:
            current = await ctx.store.get(path)
        except StoreError as exc:  # the batch this health is about: UNKNOWN
            report.errors.append(f"{path} not readable: {exc.message}")
            current = None
            batch_paths.add(path)
        if current is not None:
            batch_paths.add(path)
            if isinstance(current.data, dict):
                batch_rows = [(path, current.data)]
            else:
                report.unreadable.append({"path": path, "reason": "not a JSON object"})
    history = await telemetry.signal_events(ctx, batch_id=batch_id)
    if history.error:
        report.errors.append(history.error)
    report.unreadable.extend({"path": p, "reason": r} for p, r in history.unreadable)
    if history.partial:
        report.partial.append("events")

    lane_owners: set[str] = set()
    for _, manifest in batch_rows:
        for lane in manifest.get("lanes") if isinstance(manifest.get("lanes"), list) else []:
            owner = lane_owner_of(lane)
            if owner:
                lane_owners.add(owner)

    heartbeat_by_agent: dict[str, dict[str, Any]] = {}
    for path, beat in beats.rows:
        agent = path.rsplit("/", 1)[-1].removesuffix(".json")
        heartbeat_by_agent[agent] = beat
    heartbeat_agents = set(heartbeat_by_agent) | {
        p["path"].rsplit("/", 1)[-1].removesuffix(".json")
        for p in report.unreadable if p["path"].startswith("heartbeats/")
    }

    def in_scope(record: dict[str, Any], agent: str | None = None) -> bool:
        return batch_id is None or record.get("batch_id") == batch_id or (agent is not None and agent in lane_owners)

    known: dict[str, bool] = {}
    for path in batch_paths:
        known[path.rsplit("/", 1)[-1].removesuffix(".json")] = True
    named = {r.get("batch_id") for _, r in claims.rows if in_scope(r)} | {
        r.get("batch_id") for p, r in beats.rows if in_scope(r, p.rsplit("/", 1)[-1].removesuffix(".json"))
    }
    for batch in sorted(b for b in named if isinstance(b, str) and b and b not in known):
        if batch_id is None:
            known[batch] = False
            continue
        try:
            known[batch] = await ctx.store.get(ids.batch_path(batch)) is not None
        except Exception:  # an unsafe or unreadable id: do not guess it is missing
            known[batch] = True

    def manifest_exists(batch: str) -> bool:
        return known.get(batch, False)

    # -- claims and heartbeats ------------------------------------------------
    scoped_claims = [(p, c) for p, c in claims.rows if in_scope(c)]
    for path, claim in scoped_claims:
        about = dict(path=path, repo=claim.get("repo"), target=claim.get("target"),
                     agent_id=claim.get("agent_id"), batch_id=claim.get("batch_id"))
        if not has_machine_identity(claim):
            report.warn("missing_machine_identity", f"claim {path} has no machine_id (or machine/hostname)", **about)
        holder = claim.get("agent_id")
        if _active_claim(claim, now_text) and not _recent(claim.get("claimed_at"), now, grace):
            beat = heartbeat_by_agent.get(holder) if isinstance(holder, str) else None
            if beat is None and holder in heartbeat_agents:
                pass  # unreadable heartbeat: reported as unreadable, not as missing
            elif beat is None:
                report.warn("claim_without_heartbeat", f"active claim {path} has no heartbeat for its holder {holder}", **about)
            elif beat.get("target") is not None and (
                str(beat.get("target")) != str(claim.get("target")) or beat.get("repo") not in (None, claim.get("repo"))
            ):
                report.warn(
                    "claim_without_heartbeat",
                    f"active claim {path}: holder {holder}'s heartbeat is for "
                    f"{beat.get('repo', '?')}#{beat.get('target')}, not this target",
                    **about,
                )
        batch = claim.get("batch_id")
        if isinstance(batch, str) and batch and not manifest_exists(batch):
            report.warn("missing_batch_manifest", f"claim {path} names batch {batch}, which has no retained manifest", **about)
    for path, beat in beats.rows:
        agent = path.rsplit("/", 1)[-1].removesuffix(".json")
        if not in_scope(beat, agent):
            continue
        about = dict(path=path, agent_id=agent, repo=beat.get("repo"), target=beat.get("target"), batch_id=beat.get("batch_id"))
        if not has_machine_identity(beat):
            report.warn("missing_machine_identity", f"heartbeat {path} has no machine_id (or machine/hostname)", **about)
        batch = beat.get("batch_id")
        if isinstance(batch, str) and batch and not manifest_exists(batch):
            report.warn("missing_batch_manifest", f"heartbeat {path} names batch {batch}, which has no retained manifest", **about)

    # -- manifests --------------------------------------------------------------
    lanes = _Lanes(claims.rows, beats.rows, heartbeat_agents, now, grace)
    batches_with_events = {e.get("batch_id") for e in history.events}
    for path, manifest in batch_rows:
        own = manifest.get("batch_id") if isinstance(manifest.get("batch_id"), str) else path.rsplit("/", 1)[-1].removesuffix(".json")
        prompt_text = manifest.get("launch_prompt")
        if not isinstance(prompt_text, str) or not prompt_text.strip():
            report.warn("manifest_without_launch_prompt", f"batch {own} has no launch_prompt", path=path, batch_id=own)
        else:
            drift = prompt_drift(manifest)
            if drift is not None:
                parts = []
                if drift["prompt_only"]:
                    parts.append("prompt only: " + ", ".join(drift["prompt_only"]))
                if drift["manifest_only"]:
                    parts.append("manifest only: " + ", ".join(drift["manifest_only"]))
                report.warn("launch_prompt_target_drift",
                            f"batch {own}: launch prompt targets drift from manifest targets ({'; '.join(parts)})",
                            path=path, batch_id=own, **drift)
        lanes.check(report, path, own, manifest)
        blocker = manifest.get("blocker")
        if isinstance(blocker, dict):
            report.warn("batch_blocked", f"batch {own} is blocked: {blocker.get('message')}",
                        path=path, batch_id=own, blocker=blocker)
        if own not in batches_with_events:
            report.warn("batch_without_history", f"batch {own} has no history events", path=path, batch_id=own)
    for problem in history.problems:
        report.warn("malformed_history_line", telemetry._problem_text(problem),
                    path=problem["file"], line=problem.get("line"))

    pending = open_requests(history.events, now)
    if ctx.seen is not None and not (history.error or history.partial):  # the fleet gauges
        ctx.seen.open_requests(ctx.store.name, pending, batch_id=batch_id)
    for request in pending:
        if request["age_seconds"] is not None and request["age_seconds"] > threshold:
            report.warn("request_unanswered",
                        f"{request['type']} {request['event_id']} of batch {request.get('batch_id')} "
                        f"has no answer after {int(request['age_seconds'])}s",
                        **{k: request.get(k) for k in ("batch_id", "lane", "agent_id")},
                        event_id=request["event_id"], age_seconds=request["age_seconds"])

    clock = None
    reference = ctx.store.capabilities.clock
    if reference is not None:  # a remote backend: is this machine's clock close enough to judge?
        clock = clock_report(await reference.measured(), ctx.lease.max_clock_offset)
        if clock["status"] == "beyond_bound":
            report.warn("clock_offset", clock["summary"], offset_seconds=clock["offset_seconds"],
                        bound_seconds=clock["bound_seconds"])
    for item in report.unreadable:  # its own problem: named, everything else checked
        report.warn("unreadable_record", f"record {item['path']} cannot be read: {item['reason']}",
                    path=item["path"])

    qa_rows = _qa(batch_rows, scoped_claims, [b for p, b in beats.rows if in_scope(b, p.rsplit("/", 1)[-1].removesuffix(".json"))], history.events)
    counts = {name: 0 for name in SIGNALS}
    for warning in report.warnings:
        counts[warning["signal"]] += 1
    qa_counts: dict[str, int] = {}
    for row in qa_rows:
        qa_counts[row["qa"]] = qa_counts.get(row["qa"], 0) + 1
    # Effective usage limits (docs/capacity.md): additive and informational — a limit is a
    # provider fact, not a coordination fault; in batch scope those of its lanes' pools.
    try:
        limited = await host_limits.projected(
            ctx.store, now, None if batch_id is None else
            host_limits.lane_quota_hosts([m for _, m in batch_rows]), effective_only=True)
    except Forbidden:  # outside the caller's scopes: no projection
        limited = []
    except StoreError:
        limited = []
        report.partial.append("host_limits")
    unknown = bool(report.errors)
    exit_code = EXIT_OPERATIONAL if unknown else (EXIT_WARNINGS if report.warnings else EXIT_OK)
    return {
        "version": CONTRACT_VERSION,
        "scope": {"kind": "batch", "batch_id": batch_id} if batch_id else {"kind": "all"},
        "checked_at": now_text,
        "verdict": "unknown" if unknown else ("warnings" if report.warnings else "clean"),
        "signals": counts,
        "warnings": report.warnings,
        "qa": qa_rows,
        "qa_summary": qa_counts,
        "open_requests": pending,
        "unanswered_after_seconds": threshold,
        "first_heartbeat_grace_seconds": grace,
        "unreadable": report.unreadable,
        "errors": report.errors,
        "partial": report.partial,
        **({"clock": clock} if clock is not None else {}),
        **({"host_limits": limited} if limited else {}),
        "exit_code": exit_code,
    }


def _qa(
    manifests: list[tuple[str, dict[str, Any]]],
    claims: list[tuple[str, dict[str, Any]]],
    beats: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    prs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(repo: Any, target: Any, **info: Any) -> None:
        if not isinstance(repo, str) or target is None:
            return
        row = prs.setdefault((repo, str(target)), {"repo": repo, "target": str(target)})
        for key, value in info.items():
            if value is not None:
                row.setdefault(key, value)

    for _, manifest in manifests:
        repo = manifest.get("repo")
        batch = manifest.get("batch_id")
        for item in manifest.get("targets") if isinstance(manifest.get("targets"), list) else []:
            if isinstance(item, dict) and (item.get("type") == "pull_request" or pr_of(item.get("url"))):
                parsed = pr_of(item.get("url"))
                add(parsed[0] if parsed else repo, item.get("target") or (parsed and parsed[1]),
                    batch_id=batch, pr_url=item.get("url"), title=item.get("title"))
        for lane in manifest.get("lanes") if isinstance(manifest.get("lanes"), list) else []:
            parsed = pr_of(lane.get("pr_url")) if isinstance(lane, dict) else None
            if parsed:
                add(*parsed, batch_id=batch, lane=lane_name_of(lane), pr_url=lane.get("pr_url"))
            elif isinstance(lane, dict) and lane.get("pr_url") and len(lane_targets_of(lane)) == 1:
                add(repo, lane_targets_of(lane)[0], batch_id=batch, lane=lane_name_of(lane), pr_url=lane.get("pr_url"))
    for record in [c for _, c in claims] + beats:
        parsed = pr_of(record.get("pr_url"))
        if parsed:
            add(*parsed, batch_id=record.get("batch_id"), pr_url=record.get("pr_url"))
    latest = telemetry.latest_qa(events)
    for (repo, target), event in latest.items():
        add(repo, target, batch_id=event.get("batch_id"), pr_url=event.get("pr_url"))
    rows = []
    for key, row in prs.items():
        rows.append({**row, **telemetry.qa_view(latest.get(key))})
    rows.sort(key=lambda r: (r["repo"], _num(r["target"])))
    return rows
