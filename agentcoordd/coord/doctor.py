"""doctor: can coordination be trusted on this machine right now?

Pure checks over (Store, Clock, Identity) plus facts the daemon gathered
(which backend was selected and why, whether the local root exists, the
consumer env files, the split-brain state, the caller's identity). Nothing here
reads the environment or the filesystem directly; LocalStore does the file
access and fails closed on symlinks below the root.

* lightweight (default): backend access and layout without parsing records —
  the local root exists and every family directory can be walked (no symlink,
  no file where a directory belongs); on HTTP/etcd `/v1/health` (HTTP) plus a
  one-record listing of `claims`. `--doctor-prefix P` replaces the default
  probe: a directory prefix is listed, an exact record path is read.
* deep: every record of claims, heartbeats, batches, events and archive (or of
  the `--doctor-prefix` prefixes) decoded with its `model.records` Struct; the
  first failing path is named. On HTTP also `/v1/whoami`: the authenticated
  machine, its scopes, and `machine_match` against the caller's machine id.
  As agent-coord does, a family a scoped HTTP token cannot read (403) is
  reported `forbidden` and one it reads only partly `partial` (each with a
  note in `degraded`/`section_notes`); neither makes the verdict an error.
* the clock (ours, HTTP and etcd): how far this machine's clock is from the
  backend's (store/clockref.py); beyond the lease policy's bound the doctor
  fails, as every takeover would (coord/lease.py).

The results feed two renderings built here as plain dicts: the spec's legacy
report (`legacy_report`, the keys of `doctor --json`) and the stack component
contract v1 (`stack_report`, `doctor --stack-json`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from agentcoordd import __version__
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.lease import clock_report
from agentcoordd.model import ids, records
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.store.base import Page, StoreError, UnreadableEntries

try:  # the contract version every `version`/`status` payload carries
    from agentcoordd.coord.info import CONTRACT_VERSION
except ImportError:  # pragma: no cover - info.py ships with this package
    CONTRACT_VERSION = __version__

DEEP_FAMILIES = ("claims", "heartbeats", "batches", "events", "archive")
DEFAULT_REMOTE_PROBE = "claims"
MAX_INVALID_LISTED = 20
ROTATION_COMMAND = (
    "agentcoordctl token provision {machine} --rotate --database agent-coord "
    "--read-prefix <read-prefix> --write-prefix <write-prefix>"
)
STACK_SCHEMA_VERSION = 1
STACK_COMPONENT = "agent-coordination"
BACKEND_GUIDANCE = "Restore access to the configured coordination backend, then rerun the doctor."
LEGACY_GUIDANCE = (
    "The legacy GitHub backend is not supported by agentcoord; select the fleet backend with "
    "--api-url or --etcd-endpoints (or a local root with --state-root), then rerun the doctor."
)
SCOPE_GUIDANCE = (
    "This machine token cannot read the probed prefix; pass a prefix it can read: "
    "doctor --doctor-prefix <read-prefix>."
)
ROTATE_GUIDANCE = "The machine token is unknown or revoked; rotate it: {command}"
DEEP_GUIDANCE = (
    "Repair, restore or remove the named records (or restore read access to them), "
    "then rerun the doctor --deep."
)
MISMATCH_GUIDANCE = (
    "Install this machine's own token, or set AGENT_COORD_MACHINE_ID to the token's machine, "
    "then rerun the doctor."
)


# ---- what the daemon tells us -----------------------------------------------------


@dataclass(frozen=True)
class BackendFacts:
    """The selected backend as the daemon resolved it (never a token)."""

    kind: str  # local | http | etcd | github | unknown
    location: str | None = None  # state root, API URL, endpoints, OWNER/REPO
    source: str = ""
    implicit: bool = False  # the zero-config root, not chosen by anyone
    # local: "ok" | "missing" | "not_a_directory" | "unreadable" (with root_error)
    root_state: str | None = None
    root_error: str | None = None
    initialized: bool = False  # the zero-config root was created by this run
    error: str | None = None  # selecting/opening the backend failed
    split_brain_env_file: str | None = None
    env_file_errors: tuple[tuple[str, str], ...] = ()  # (path, reason)
    identity_error: str | None = None


# ---- results ----------------------------------------------------------------------


@dataclass
class Probe:
    """One lightweight read: a directory listing or an exact record read."""

    prefix: str
    method: str  # list | read | walk | health
    status: str = "ok"  # ok | partial | forbidden (deep, scoped HTTP token) | error
    error: str | None = None
    failing_path: str | None = None
    token_rejected: bool = False
    forbidden: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prefix": self.prefix, "method": self.method,
                               "status": self.status}
        if self.error:
            out["error"] = self.error
            out["failing_path"] = self.failing_path
        return out


@dataclass
class FamilyResult:
    """The deep audit of one prefix (a family, archive, or a --doctor-prefix)."""

    prefix: str
    # ok | partial (listing filtered by the token's scope) | forbidden (the
    # token cannot read it at all: HTTP 403) | invalid | error
    status: str = "ok"
    records: int = 0
    invalid: list[dict[str, str]] = field(default_factory=list)
    invalid_count: int = 0
    error: str | None = None
    failing_path: str | None = None
    token_rejected: bool = False

    @property
    def note(self) -> str | None:
        """What a scoped token leaves unknown here (agent-coord's section note)."""
        if self.status == "forbidden":
            return f"{self.prefix} not readable by scoped token"
        if self.status == "partial":
            return f"{self.prefix} filtered by scoped token"
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prefix": self.prefix, "status": self.status,
                               "records": self.records}
        if self.note:
            out["note"] = self.note
        if self.invalid_count:
            out["invalid_count"] = self.invalid_count
            out["invalid"] = self.invalid
        if self.error:
            out["error"] = self.error
        if self.failing_path:
            out["failing_path"] = self.failing_path
        return out


@dataclass
class Report:
    facts: BackendFacts
    deep: bool
    client_version: str
    identity: Identity
    prefixes: list[str]  # what --doctor-prefix asked for ([] = defaults)
    probes: list[Probe] = field(default_factory=list)
    families: list[FamilyResult] = field(default_factory=list)
    backend_error: str | None = None  # lightweight verdict: the backend is not readable
    backend_failing_path: str | None = None
    # Unusable as a whole (no selection, missing root, health, unreachable):
    # nothing deeper is attempted. A failed probe of one prefix is not fatal.
    fatal: bool = False
    whoami: dict[str, Any] | None = None
    whoami_error: str | None = None
    token_rejected: bool = False
    timed_out: bool = False
    clock: dict[str, Any] | None = None  # a remote backend's clock offset (clock_report)

    # -- derived ----------------------------------------------------------------

    @property
    def readable(self) -> bool:
        return self.backend_error is None

    @property
    def unavailable(self) -> bool:
        return self.fatal

    @property
    def token_machine(self) -> str | None:
        return (self.whoami or {}).get("machine")

    @property
    def machine_match(self) -> str:
        machine, token = self.identity.machine_id, self.token_machine
        if machine is None or token is None:
            return "unverified"
        return "match" if machine == token else "mismatch"

    @property
    def deep_failures(self) -> list[FamilyResult]:
        return [f for f in self.families if f.status in ("invalid", "error")]

    @property
    def section_notes(self) -> dict[str, str]:
        """prefix -> note for the families a scoped token reads partly or not at all."""
        return {f.prefix: f.note for f in self.families if f.note}

    def rotation_command(self) -> str | None:
        if not self.token_rejected:
            return None
        return ROTATION_COMMAND.format(machine=self.identity.machine_id or "<machine>")

    def first_error(self) -> tuple[str | None, str | None]:
        """(message, failing path) of the first thing that went wrong."""
        if self.facts.identity_error:
            return self.facts.identity_error, None
        if self.backend_error:
            return self.backend_error, self.backend_failing_path
        for family in self.deep_failures:
            if family.error:
                return f"{family.prefix}: {family.error}", family.failing_path
            first = family.invalid[0]
            return f"{family.prefix}: {first['error']}", first["path"]
        if self.whoami_error:
            return self.whoami_error, "/v1/whoami"
        if self.clock is not None and self.clock["status"] == "beyond_bound":
            return self.clock["summary"], None
        if self.facts.env_file_errors:
            path, reason = self.facts.env_file_errors[0]
            return f"cannot use consumer env file {path}: {reason}", None
        return None, None

    @property
    def status(self) -> str:
        """ok | split_brain | error | machine_mismatch (legacy report)."""
        if self.facts.split_brain_env_file:
            return "split_brain"
        if self.first_error()[0] is not None:
            return "error"
        if self.machine_match == "mismatch":
            return "machine_mismatch"
        return "ok"


# ---- validation -------------------------------------------------------------------


def check_prefix(prefix: str) -> str:
    """A --doctor-prefix: a state directory prefix or an exact record path."""
    if isinstance(prefix, str) and prefix.endswith(".json"):
        try:
            return ids.state_path(prefix)
        except UsageError:
            pass
    try:
        return ids.state_prefix(prefix)
    except UsageError:
        pass
    # agent-coord's words, in its order
    text = str(prefix)
    if not text or ".." in text or text.startswith("/") or "" in text.split("/") \
            or "." in text.split("/"):
        raise UsageError(f"unsafe state path: {text}")
    family = text.split("/", 1)[0]
    if family not in (*ids.FAMILIES, ids.ARCHIVE):
        raise UsageError(f"unknown doctor prefix family: {family}")
    raise UsageError(f"invalid doctor prefix shape: {text}")


def _is_record(prefix: str) -> bool:
    return prefix.endswith(".json")


def _family_of(path: str) -> str:
    segments = path.split("/")
    if segments[0] == ids.ARCHIVE:
        return ids.ARCHIVE
    return segments[0]


def validate_record(path: str, data: Any) -> str | None:
    """None when `data` is a valid record for `path`'s family, else why not."""
    family = _family_of(path)
    try:
        if family == ids.ARCHIVE:
            if not isinstance(data, dict):
                return f"invalid record at {path}: not a JSON object"
            msgspec.convert(data, records.ArchiveEnvelope)
        elif family == "claims":
            records.load(records.Claim, data, path)
        elif family == "heartbeats":
            records.load(records.Heartbeat, data, path)
        elif family == "batches":
            records.load(records.Batch, data, path)
        elif family == "events":
            closeout = (isinstance(data, dict) and data.get("type") == "lane_closed"
                        and data.get("schema_version") == records.LANE_CLOSED_SCHEMA_VERSION)
            records.load(records.LaneClosed if closeout else records.Event, data, path)
        else:  # pragma: no cover - paths come from the store's own grammar
            return f"unknown record family at {path}"
    except msgspec.ValidationError as exc:
        return f"invalid record at {path}: {exc}"
    except CoordError as exc:
        return exc.message
    return None


_PATH_IN_MESSAGE = (
    re.compile(r"refused: (\S+)$"),
    re.compile(r"^state layout invalid: (\S+) is "),
    re.compile(r"in record (\S+)$"),
    re.compile(r"^cannot (?:read|inspect|list|lock) (\S+) under "),
    re.compile(r"scope for (\S+) at "),
    re.compile(r" by (\S+) at "),
    re.compile(r"^record not found: (\S+)"),
)


def failing_path(message: str, fallback: str | None) -> str | None:
    """The state path a store error names (they all name one), else `fallback`."""
    for pattern in _PATH_IN_MESSAGE:
        match = pattern.search(message)
        if match and not match.group(1).startswith(("http://", "https://")):
            return match.group(1).rstrip(":")
    return fallback


def _token_rejected(exc: Exception) -> bool:
    return type(exc).__name__ == "TokenRejected"


def _forbidden(exc: Exception) -> bool:
    from agentcoordd.store.base import Forbidden

    return isinstance(exc, Forbidden)


# ---- the checks -------------------------------------------------------------------


async def _list_paths(store: Any, prefix: str) -> list[str] | None:
    """Record paths below `prefix` without reading them, when the store can."""
    lister = store.capabilities.paths
    if lister is None:
        return None
    return list(await lister.list_paths(prefix))


async def _probe(store: Any, prefix: str, local: bool) -> Probe:
    if _is_record(prefix):
        probe = Probe(prefix, "read")
        action = store.get(prefix)
    elif local and store.capabilities.paths is not None:
        probe = Probe(prefix, "walk")
        action = store.capabilities.paths.list_paths(prefix)
    else:
        probe = Probe(prefix, "list")
        action = store.list(prefix, 1)
    try:
        result = await action
    except StoreError as exc:
        probe.status = "error"
        probe.error = exc.message
        probe.failing_path = failing_path(exc.message, prefix)
        probe.token_rejected = _token_rejected(exc)
        probe.forbidden = _forbidden(exc) and not probe.token_rejected
        return probe
    if isinstance(result, Page) and result.partial:
        probe.status = "partial"
    return probe


def _scoped_out(report: Report, exc: StoreError) -> bool:
    """A deep HTTP doctor meeting a 403: the token's scope, reported, not an error."""
    return (report.deep and report.facts.kind == "http" and _forbidden(exc)
            and not _token_rejected(exc))


async def _lightweight(report: Report, store: Any) -> None:
    facts = report.facts
    report.fatal = True  # until the backend answered
    if facts.error:
        report.backend_error = facts.error
        return
    if facts.kind == "local":
        root = facts.location
        if facts.root_state == "missing":
            report.backend_error = f"state root does not exist: {root}"
            return
        if facts.root_state == "not_a_directory":
            report.backend_error = f"state root is not a directory: {root}"
            return
        if facts.root_state == "unreadable":
            report.backend_error = f"state root is not readable: {root} ({facts.root_error})"
            return
    service = store.capabilities.introspection
    if facts.kind == "http" and service is not None:
        try:
            healthy = await service.health()
        except StoreError as exc:
            report.probes.append(Probe("/v1/health", "health", "error", exc.message))
            report.backend_error = exc.message
            return
        if not healthy:
            message = f"{facts.location}/v1/health did not answer status ok"
            report.probes.append(Probe("/v1/health", "health", "error", message))
            report.backend_error = message
            return
    report.fatal = False
    if report.prefixes:
        targets = list(report.prefixes)
    elif facts.kind == "local":
        targets = list(DEEP_FAMILIES)
    else:
        targets = [DEFAULT_REMOTE_PROBE]
    for prefix in targets:
        probe = await _probe(store, prefix, facts.kind == "local")
        report.probes.append(probe)
        if probe.forbidden and report.deep and facts.kind == "http":
            probe.status = "forbidden"  # the deep scan reports it (agent-coord skips this probe)
            continue
        if probe.status == "error" and report.backend_error is None:
            report.backend_error = probe.error
            report.backend_failing_path = probe.failing_path
            report.token_rejected = report.token_rejected or probe.token_rejected
            if probe.error and probe.error.startswith("backend unreachable"):
                report.fatal = True  # nothing deeper can answer either
                return


async def _scan(report: Report, store: Any, prefix: str) -> FamilyResult:
    """Read and validate every record below `prefix` (or the one record it names)."""
    result = FamilyResult(prefix)

    def invalid(path: str, message: str) -> None:
        result.invalid_count += 1
        if len(result.invalid) < MAX_INVALID_LISTED:
            result.invalid.append({"path": path, "error": message})

    try:
        if _is_record(prefix):
            found = await store.get(prefix)
            entries = [] if found is None else [(prefix, found.data)]
            result.records = len(entries)
            for path, data in entries:
                why = validate_record(path, data)
                if why:
                    invalid(path, why)
        else:
            paths = await _list_paths(store, prefix)
            if paths is not None:  # local: read one by one, so one bad file names itself
                for path in paths:
                    try:
                        found = await store.get(path)
                    except StoreError as exc:
                        result.records += 1
                        invalid(path, exc.message)
                        continue
                    if found is None:
                        continue  # removed since the walk
                    result.records += 1
                    why = validate_record(path, found.data)
                    if why:
                        invalid(path, why)
            else:
                cursor: str | None = None
                while True:
                    try:
                        page = await store.list(prefix, None, cursor)
                    except UnreadableEntries as exc:  # name each, check the rest
                        page = exc.page
                        for path, reason in exc.unreadable:
                            result.records += 1
                            invalid(path, f"{reason} in record {path}")
                    if page.partial:
                        result.status = "partial"
                    for entry in page.entries:
                        result.records += 1
                        why = validate_record(entry.path, entry.data)
                        if why:
                            invalid(entry.path, why)
                    if not page.next_cursor:
                        break
                    cursor = page.next_cursor
    except StoreError as exc:
        if _scoped_out(report, exc):
            result.status = "forbidden"
            return result
        result.status = "error"
        result.error = exc.message
        result.failing_path = failing_path(exc.message, prefix)
        result.token_rejected = _token_rejected(exc)
        return result
    if result.invalid_count:
        result.status = "invalid"
        result.failing_path = result.invalid[0]["path"]
    return result


async def _deep(report: Report, store: Any) -> None:
    for prefix in report.prefixes or DEEP_FAMILIES:
        family = await _scan(report, store, prefix)
        report.families.append(family)
        report.token_rejected = report.token_rejected or family.token_rejected
    service = store.capabilities.introspection
    if report.facts.kind == "http" and service is not None:
        try:
            me = await service.whoami()
        except StoreError as exc:
            report.whoami_error = exc.message
            report.token_rejected = report.token_rejected or _token_rejected(exc)
            return
        report.whoami = {"machine": me.machine, "read_prefixes": list(me.read_prefixes),
                         "write_prefixes": list(me.write_prefixes)}


async def doctor(ctx: Ctx, facts: BackendFacts, *, deep: bool = False,
                 prefixes: list[str] | None = None, client_version: str = "",
                 budget: float | None = None) -> Report:
    """Run the checks; never raises for backend trouble (that is the report)."""
    wanted = [check_prefix(p) for p in (prefixes or [])]
    report = Report(facts=facts, deep=deep, client_version=client_version or __version__,
                    identity=ctx.identity, prefixes=wanted)
    store = ctx.store
    try:
        with anyio.fail_after(budget) if budget else contextlib.nullcontext():
            await _lightweight(report, store)
            if deep and not report.fatal:
                await _deep(report, store)
            if not report.fatal and store.capabilities.clock is not None:
                report.clock = clock_report(await store.capabilities.clock.measured(),
                                            ctx.lease.max_clock_offset)
    except TimeoutError:
        report.timed_out = True
        message = (f"the backend did not answer within {budget:g}s; coordination state is "
                   "UNKNOWN")
        if not report.families and (report.fatal or report.backend_error is None):
            report.backend_error = report.backend_error or message
            report.fatal = True
        else:
            report.families.append(FamilyResult("(timeout)", "error", error=message))
    return report


# ---- renderings -------------------------------------------------------------------


def _backend_fields(facts: BackendFacts) -> dict[str, Any]:
    return {
        "backend": facts.kind,
        "backend_repo": facts.location if facts.kind == "github" else None,
        "backend_url": facts.location if facts.kind in ("http", "etcd") else None,
        "state_root": facts.location if facts.kind == "local" else None,
    }


def environment_identity(report: Report) -> dict[str, Any]:
    identity = report.identity
    return {
        "client_version": report.client_version,
        "machine_id": identity.machine_id,
        "session_id": identity.session_id,
        "session_source": identity.session_source or "unset",
        "token_machine": report.token_machine,
        "machine_match": report.machine_match,
    }


def legacy_report(report: Report) -> dict[str, Any]:
    """`doctor --json`: the spec's keys, then ours only when they carry news.

    Healthy lightweight and deep local reports have exactly the spec's key set
    (../shared/spec/outputs/doctor-json.txt, doctor-deep-json.txt).
    """
    facts = report.facts
    out: dict[str, Any] = {"version": CONTRACT_VERSION, **_backend_fields(facts),
                           "deep": report.deep, "status": report.status}
    if report.deep:
        out["environment_identity"] = environment_identity(report)
    if facts.split_brain_env_file:
        out["split_brain_env_file"] = facts.split_brain_env_file
    message, path = report.first_error()
    if message:
        out["error"] = message
        if path:
            out["failing_path"] = path
    rotation = report.rotation_command()
    if rotation:
        out["rotation_command"] = rotation
    if facts.env_file_errors:
        out["env_file_errors"] = [{"path": p, "error": e} for p, e in facts.env_file_errors]
    if report.prefixes or any(p.status != "ok" for p in report.probes if p.method != "health"):
        out["probes"] = [p.to_dict() for p in report.probes]
    if report.deep and report.families and (
        facts.kind != "local" or report.prefixes
        or any(f.status != "ok" for f in report.families)
    ):
        out["families"] = [f.to_dict() for f in report.families]
    if report.whoami is not None:
        out["authenticated_machine"] = report.whoami["machine"]
        out["scopes"] = {"read": report.whoami["read_prefixes"],
                         "write": report.whoami["write_prefixes"]}
    notes = report.section_notes
    if notes:  # agent-coord's keys for what a scoped token leaves unknown
        out["degraded"] = list(dict.fromkeys(notes.values()))
        out["section_notes"] = notes
    if facts.initialized:
        out["initialized"] = True
    if report.clock is not None and (report.deep or report.clock["status"] != "ok"):
        out["clock"] = report.clock  # ours: news when deep, or when it is not ok
    return out


def legacy_exit(report: Report) -> int:
    return 0 if report.status == "ok" else 2


def _check(id_: str, status: str, summary: str, details: dict[str, Any],
           guidance: str | None = None) -> dict[str, Any]:
    return {"id": id_, "status": status, "summary": summary, "details": details,
            "guidance": guidance}


def stack_report(report: Report, *, daemon_version: str | None = None) -> dict[str, Any]:
    """`doctor --stack-json`: the component contract v1."""
    facts = report.facts
    checks = []

    # cli.version
    details: dict[str, Any] = {"version": report.client_version}
    if daemon_version and daemon_version != report.client_version:
        details["daemon_version"] = daemon_version
        checks.append(_check(
            "cli.version", "degraded",
            "agent-coord CLI and agentcoordd versions differ", details,
            "Restart agentcoordd so it runs the installed version: agentcoordctl daemon stop "
            "(the next call starts it) or systemctl --user restart agentcoordd."))
    else:
        checks.append(_check("cli.version", "healthy", "agent-coord CLI is ready", details))

    # backend.readability
    details = _backend_fields(facts)
    if report.readable:
        partial = [p.prefix for p in report.probes if p.status == "partial"]
        if partial:
            details["partial_prefixes"] = partial
        checks.append(_check("backend.readability", "healthy",
                             "Coordination backend is readable", details))
    else:
        details["error"] = report.backend_error
        if report.backend_failing_path:
            details["failing_path"] = report.backend_failing_path
        if facts.kind == "github":
            guidance = LEGACY_GUIDANCE
        elif report.token_rejected:
            guidance = ROTATE_GUIDANCE.format(command=report.rotation_command())
        elif facts.kind == "http" and any(p.forbidden for p in report.probes):
            guidance = SCOPE_GUIDANCE
        else:
            guidance = BACKEND_GUIDANCE
        checks.append(_check("backend.readability", "failed",
                             "Coordination backend is not readable", details, guidance))

    # resources.deep
    scanned = list(report.prefixes or DEEP_FAMILIES)
    scope: dict[str, Any] = {"mode": "deep", "prefixes": scanned}
    if report.prefixes:  # agent-coord names the families a --doctor-prefix left unprobed
        probed = {p.split("/", 1)[0] for p in report.prefixes}
        scope["unprobed_prefixes"] = [f for f in DEEP_FAMILIES if f not in probed]
    if not report.deep:
        checks.append(_check("resources.deep", "skipped",
                             "Deep resource evidence was not requested", {"mode": "shallow"}))
    elif report.unavailable or not report.readable:  # no backend, no resource evidence
        checks.append(_check(
            "resources.deep", "skipped",
            "Resource evidence was not collected because the backend is unavailable",
            {"mode": "deep", "reason": "backend_unavailable"}))
    elif report.deep_failures or report.whoami_error:
        failures = [{"prefix": f.prefix, "status": f.status,
                     "path": f.failing_path,
                     "error": f.error or (f.invalid[0]["error"] if f.invalid else None)}
                    for f in report.deep_failures]
        if report.whoami_error:
            failures.append({"prefix": "/v1/whoami", "status": "error", "path": "/v1/whoami",
                             "error": report.whoami_error})
        guidance = (ROTATE_GUIDANCE.format(command=report.rotation_command())
                    if report.token_rejected else DEEP_GUIDANCE)
        checks.append(_check("resources.deep", "failed",
                             "Deep coordination resources are not valid or not readable",
                             {**scope, "failures": failures},
                             guidance))
    elif report.section_notes:
        details = {**scope, "notes": report.section_notes}
        for status in ("partial", "forbidden"):
            hit = [f.prefix for f in report.families if f.status == status]
            if hit:
                details[f"{status}_prefixes"] = hit
        checks.append(_check(
            "resources.deep", "degraded",
            "Deep coordination resources are only partly visible to this machine token",
            details,
            "Listings were filtered by, or refused for, the token's read scope; what is "
            "missing is unknown."))
    else:
        if report.prefixes:
            checks.append(_check("resources.deep", "healthy",
                                 "Requested coordination resource is readable",
                                 {**scope, "resource_checks": {p: "ok" for p in scanned}}))
        else:
            checks.append(_check("resources.deep", "healthy",
                                 "Deep coordination resources are readable", scope))

    # identity.machine
    details = environment_identity(report)
    match = report.machine_match
    if facts.identity_error:
        details["error"] = facts.identity_error
        checks.append(_check("identity.machine", "failed",
                             "Machine identity in the environment is invalid", details,
                             "Fix AGENT_COORD_MACHINE_ID / AGENT_COORD_SESSION_ID, then rerun "
                             "the doctor."))
    elif match == "mismatch":
        checks.append(_check(
            "identity.machine", "failed",
            "Machine identity does not match the authenticated backend token machine",
            details, MISMATCH_GUIDANCE))
    elif match == "match":
        checks.append(_check(
            "identity.machine", "healthy",
            "Machine identity matches the authenticated backend token machine", details))
    else:
        checks.append(_check(
            "identity.machine", "skipped",
            "Machine identity was not verified against an authenticated backend token machine",
            details))

    # clock.offset (ours, remote backends only: a local root's clock is this machine's)
    if report.clock is not None:
        status = {"ok": "healthy", "beyond_bound": "failed", "unknown": "skipped"}[report.clock["status"]]
        checks.append(_check("clock.offset", status, report.clock["summary"], report.clock,
                             "Synchronize this machine's clock (NTP: timedatectl, chrony), "
                             "then rerun the doctor." if status == "failed" else None))

    statuses = {c["status"] for c in checks}
    overall = "failed" if "failed" in statuses else "degraded" if "degraded" in statuses else "healthy"
    return {"schema_version": STACK_SCHEMA_VERSION, "component": STACK_COMPONENT,
            "status": overall, "checks": checks}


STACK_EXIT = {"healthy": 0, "degraded": 1, "failed": 2}


def stack_exit(stack: dict[str, Any]) -> int:
    return STACK_EXIT.get(stack.get("status", "failed"), 2)
