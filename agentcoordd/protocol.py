"""The wire protocol shared by agentcoordd and agentcoordctl.

Frames are a 4-byte big-endian length followed by a msgpack body (msgspec).
A connection starts with `Hello` from the client, answered by `Welcome` (or a
`Response` carrying the incompatibility error). After that the client sends one
`Request` per round trip; the daemon may answer with any number of `Progress`
frames before the final `Response`.

Rules every wire type follows (msgspec's asyncio-kv example, STYLE.md):
* every new field gets a default, so older peers keep decoding;
* unknown fields are ignored (never `forbid_unknown_fields`);
* requests are one Struct per command in a `tag=True` union: an unknown tag or
  a wrongly typed field is a usage error reply, never a crash.

Import cost matters: agentcoordctl imports this module on every call, so it
uses the standard library and msgspec only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Annotated, Any, Union

import msgspec

from agentcoordd import __version__
from agentcoordd.model.ids import one_line
from agentcoordd.model.records import Metadata

PROTOCOL_VERSION = 1
DAEMON_VERSION = __version__

# A request carries at most a manifest and a launch prompt (each capped by ctl)
# plus the caller's environment; anything larger is hostile or a bug.
MAX_REQUEST_FRAME = 2 * 1024 * 1024
# Responses can carry a full status listing.
MAX_RESPONSE_FRAME = 64 * 1024 * 1024
MANIFEST_CAP = 256 * 1024
LAUNCH_PROMPT_CAP = 256 * 1024
HEADER = 4

# Wire bounds on every number a request carries: values both peers can
# represent and compute with. They refuse NaN, infinities and absurd magnitudes
# at the boundary (the daemon's decoder; ctl checks before sending, naming the
# option). What a value means (a TTL is positive, a pid exists) is the use
# case's check.
Int = Annotated[int, msgspec.Meta(ge=-(2**53), le=2**53)]
Float = Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)]

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_OPERATIONAL = 2
EXIT_CLAIM_REFUSED = 3
EXIT_RESERVATION_REFUSED = 4  # capacity admission (docs/capacity.md, ADR 0008)
EXIT_STACK_USAGE = 64

# How a reply says the daemon cut a call off at its timeout (exit 2, state UNKNOWN).
CALL_TIMED_OUT = "agentcoordd: command timed out"


def is_call_timeout(error: str | None) -> bool:
    """Whether a reply's error is the daemon's call timeout (a waiter retries its slice)."""
    return error is not None and error.startswith(CALL_TIMED_OUT)


# ---- handshake ----------------------------------------------------------------


class Hello(msgspec.Struct, tag_field="op", tag="hello", kw_only=True):
    protocol: int
    client: str
    client_version: str = ""


class Welcome(msgspec.Struct, tag_field="op", tag="welcome", kw_only=True):
    protocol: int
    daemon_version: str
    pid: int = 0


# ---- request parts --------------------------------------------------------------


class Caller(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Who is asking: the forwarded environment subset, cwd and pid of ctl."""

    env: dict[str, str] = {}
    cwd: str = ""
    pid: Int = 0


class Selection(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Explicit per-call backend flags (`--state-root`, `--api-url`, …)."""

    state_root: str | None = None
    api_url: str | None = None
    etcd_endpoints: str | None = None
    backend: str | None = None  # legacy GitHub selector: recognised and refused


class KeepAlive(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`--keep-alive` on claim/heartbeat: register the lane for daemon renewal."""

    renew_every: Float | None = None  # default ttl/3
    watch_pid: Int | None = None
    watch_auto: bool = False  # --watch-pid auto: nearest agent-host ancestor of caller.pid
    idle_timeout: Float | None = None  # default 2 h; none while a watched process lives
    heartbeat_ttl: Int | None = None  # claim --keep-alive: TTL of the lane's heartbeat
    on_exit: str | None = None  # "release" (default) | "keep": the claim when the watched process exits


class _Request(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="op"):
    caller: Caller = msgspec.field(default_factory=Caller)
    selection: Selection = msgspec.field(default_factory=Selection)
    # Seconds the caller will wait; the daemon bounds its work to fit.
    timeout: Float | None = None
    # The caller prints the payload as JSON: the reply carries it encoded
    # (`Response.payload_json`), so a multi-megabyte status is not decoded only to
    # be encoded again.
    json_payload: bool = False


# ---- requests: one Struct per command ------------------------------------------


class Claim(_Request, tag_field="op", tag="claim", kw_only=True):
    agent_id: str
    repo: str
    target: str
    batch_id: str | None = None
    branch: str | None = None
    ttl: Int | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)
    keep_alive: KeepAlive | None = None


class Release(_Request, tag_field="op", tag="release", kw_only=True):
    agent_id: str
    repo: str
    target: str
    branch: str | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)
    handoff_to: str | None = None
    handoff_note: str | None = None
    terminal: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None
    workspace: str | None = None
    lane: str | None = None  # a terminal release: the batch lane it closes (else the target's)
    fencing_token: Int | None = None  # --fencing-token: only while that grant holds the target
    force: bool = False  # release a claim another machine or session took (coord.trust)


class Heartbeat(_Request, tag_field="op", tag="heartbeat", kw_only=True):
    agent_id: str
    repo: str | None = None
    target: str | None = None
    batch_id: str | None = None
    branch: str | None = None
    status: str | None = None
    ttl: Int | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)
    keep_alive: KeepAlive | None = None
    fencing_token: Int | None = None  # --fencing-token: only while that grant holds repo/target


class Takeover(_Request, tag_field="op", tag="takeover", kw_only=True):
    """`takeover --force --reason TEXT`: an operator takes a target from any holder."""

    agent_id: str
    repo: str
    target: str
    reason: str | None = None
    force: bool = False
    batch_id: str | None = None
    branch: str | None = None
    ttl: Int | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)


class RecordEvent(_Request, tag_field="op", tag="record_event", kw_only=True):
    batch_id: str
    type: str
    lane: str | None = None
    agent_id: str | None = None
    repo: str | None = None
    target: str | None = None
    branch: str | None = None
    status: str | None = None
    message: str | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)
    typed: dict[str, str] = {}
    terminal: str | None = None
    pr_state: str | None = None
    evidence_url: str | None = None
    workspace: str | None = None
    # --queue-on-failure: an event the backend cannot take goes to the daemon's
    # durable outbox (action "queued", exit 0 with a warning) instead of failing.
    queue_on_failure: bool = False
    fencing_token: Int | None = None  # --fencing-token: only while that grant holds repo/target


class FenceCheck(_Request, tag_field="op", tag="fence_check", kw_only=True):
    """`fence check --repo R --target T --token N`: is N the target's current grant?"""

    repo: str
    target: str
    token: Int


class RegisterBatch(_Request, tag_field="op", tag="register_batch", kw_only=True):
    manifest: bytes
    batch_id: str | None = None  # names the batch when the manifest does not
    launch_prompt: str | None = None
    synthetic: bool = False
    synthetic_kind: str | None = None
    source: str = ""  # the file name, for messages only


class Status(_Request, tag_field="op", tag="status", kw_only=True):
    repo: str | None = None
    target: str | None = None
    batch_id: str | None = None
    include_archived: bool = False
    events: Int | None = None  # None: 20 per batch for full status, all in batch scope
    all_events: bool = False


class BatchAudit(_Request, tag_field="op", tag="batch_audit", kw_only=True):
    batch_id: str
    include_archived: bool = False  # audit a batch gc archived from the archive


class Gc(_Request, tag_field="op", tag="gc", kw_only=True):
    execute: bool = False
    hot_days: Int | None = None
    archive_days: Int | None = None
    synthetic_hot_days: Int | None = None
    prefixes: list[str] = []


class Version(_Request, tag_field="op", tag="version", kw_only=True):
    pass


class ConfigShow(_Request, tag_field="op", tag="config_show", kw_only=True):
    pass


class DaemonStatus(_Request, tag_field="op", tag="daemon_status", kw_only=True):
    pass


class DaemonStop(_Request, tag_field="op", tag="daemon_stop", kw_only=True):
    pass


class Lanes(_Request, tag_field="op", tag="lanes", kw_only=True):
    """The daemon's keep-alive lanes (optionally one agent's)."""

    agent_id: str | None = None


class LanesStop(_Request, tag_field="op", tag="lanes_stop", kw_only=True):
    agent_id: str
    force: bool = False  # stop lanes another machine or session registered (coord.trust)


class OutboxList(_Request, tag_field="op", tag="outbox", kw_only=True):
    """`outbox [--json]`: events waiting in the daemon's durable outbox."""


class OutboxFlush(_Request, tag_field="op", tag="outbox_flush", kw_only=True):
    """`outbox flush`: retry every queued event now (ignoring backoff)."""


class _Wait(_Request, kw_only=True):
    """A wait the daemon polls: answered once the condition holds, or with exit 2 and
    `timed_out` after `wait_seconds` (kept below the request's timeout)."""

    wait_seconds: Float | None = None  # None: as long as the request's timeout allows
    poll_seconds: Float = 1.0


class WaitStopRequested(_Wait, tag_field="op", tag="wait_stop_requested", kw_only=True):
    """`wait --until-stop-requested --batch-id B`: the batch has a stop request."""

    batch_id: str


class WaitUnblocked(_Wait, tag_field="op", tag="wait_unblocked", kw_only=True):
    """`wait --until-unblocked --batch-id B --lane L`: every dependency of L is satisfied."""

    batch_id: str
    lane: str


class WaitAnswered(_Wait, tag_field="op", tag="wait_answered", kw_only=True):
    """`wait --until-answered --batch-id B --event-id ID` (and `record-event --wait-answer`):
    the request has an answer (the earliest is returned)."""

    batch_id: str
    event_id: str


class Answer(_Request, tag_field="op", tag="answer", kw_only=True):
    """`answer --batch-id B --to-event ID --message TEXT`: help_answered/escalation_answered."""

    batch_id: str
    to_event: str
    message: str
    decision: str | None = None
    agent_id: str | None = None


class Events(_Wait, tag_field="op", tag="events", kw_only=True):
    """`events --batch-id B [--after C] [--follow] …`: the batch's events after a cursor.
    With `follow`, Progress frames carry `{"events": [...]}` (and keepalives) until
    `until_type` arrives (exit 0) or `wait_seconds` pass (exit 2, `timed_out`)."""

    batch_id: str
    after: str | None = None
    types: list[str] = []
    lane: str | None = None
    follow: bool = False
    until_type: str | None = None


class Ready(_Request, tag_field="op", tag="ready", kw_only=True):
    """`ready --batch-id B [--agent-id A]`: the lanes that can start now, and why not the rest."""

    batch_id: str
    agent_id: str | None = None


class ClaimNext(_Request, tag_field="op", tag="claim_next", kw_only=True):
    """`claim --next --batch-id B --agent-id A`: claim the first ready lane A may take."""

    batch_id: str
    agent_id: str
    branch: str | None = None
    ttl: Int | None = None
    meta: Metadata = msgspec.field(default_factory=Metadata)
    keep_alive: KeepAlive | None = None


class WaitReady(_Wait, tag_field="op", tag="wait_ready", kw_only=True):
    """`wait --until-ready --batch-id B [--agent-id A]`: some lane (A may take) is ready."""

    batch_id: str
    agent_id: str | None = None


class Doctor(_Request, tag_field="op", tag="doctor", kw_only=True):
    """`doctor [--deep] [--doctor-prefix P] [--stack-json]`: can coordination be trusted?"""

    deep: bool = False
    stack: bool = False  # --stack-json: component contract v1, exits 0/1/2/64
    prefixes: list[str] = []  # --doctor-prefix (repeatable)
    client_version: str = ""


class BatchStop(_Request, tag_field="op", tag="batch_stop", kw_only=True):
    """`batch stop`: append batch.stop_requested (never kills, never touches claims)."""

    batch_id: str
    message: str | None = None


class BatchStopped(_Request, tag_field="op", tag="batch_stopped", kw_only=True):
    """`batch stopped`: append batch.stopped."""

    batch_id: str
    message: str | None = None


class BatchBlock(_Request, tag_field="op", tag="batch_block", kw_only=True):
    """`batch block`: store the batch's blocker (the Blocker panel) and append batch.blocked."""

    batch_id: str
    message: str
    decisions: list[str] = []
    recommended_reply: str | None = None
    agent_id: str | None = None


class BatchUnblock(_Request, tag_field="op", tag="batch_unblock", kw_only=True):
    """`batch unblock`: the operator's answer (decision, by whom); append batch.unblocked."""

    batch_id: str
    decision: str | None = None
    message: str | None = None
    agent_id: str | None = None


class BatchComplete(_Request, tag_field="op", tag="batch_complete", kw_only=True):
    """`batch complete [--report FILE]`: write the batch completion report (ctl reads FILE)."""

    batch_id: str
    report: str | None = None


class Health(_Request, tag_field="op", tag="health", kw_only=True):
    """`health [--batch-id B]`: the telemetry contract's health signals and QA per PR."""

    batch_id: str | None = None
    # Warn about a help/escalation request open longer than this (None: the daemon's default).
    unanswered_after: Float | None = None
    # No heartbeat warning for a claim or batch younger than this (None: the default).
    first_heartbeat_grace: Float | None = None


class Overview(_Request, tag_field="op", tag="overview", kw_only=True):
    """Batches and lanes with machine, QA and stop state (`status --watch`)."""


class Dashboard(_Request, tag_field="op", tag="dashboard", kw_only=True):
    """`dashboard [--port N]`: start (once) the daemon's loopback dashboard; its URL."""

    port: Int | None = None


class UsageRecord(_Request, tag_field="op", tag="usage_record", kw_only=True):
    """`usage record`: upsert one per-model usage record on a batch (None: unknown)."""

    batch_id: str
    lane: str
    agent_id: str
    repo: str
    target: str
    model: str
    input_tokens: Int | None = None
    output_tokens: Int | None = None
    cost: Float | None = None
    workspace: str = "default"


# ---- capacity admission (docs/capacity.md) -------------------------------------


class _Workspaced(_Request, kw_only=True):
    workspace: str = "default"


class CapacityProfileSet(_Workspaced, tag_field="op", tag="capacity_profile_set", kw_only=True):
    """`capacity profile set ID --max-concurrency N [--disabled]`."""

    profile_id: str
    max_concurrency: Int
    enabled: bool = True


class CapacityInboxSet(_Workspaced, tag_field="op", tag="capacity_inbox_set", kw_only=True):
    """`capacity inbox set ID --profile P [--disabled]`."""

    inbox_id: str
    profile_id: str
    enabled: bool = True


class CapacityOccupancySet(_Workspaced, tag_field="op", tag="capacity_occupancy_set", kw_only=True):
    """`capacity occupancy set LANE_REF --profile P --inbox I --state S [--reason R]`."""

    lane_ref: str
    profile_id: str
    inbox_id: str
    state: str
    reason: str | None = None


class CapacityShow(_Workspaced, tag_field="op", tag="capacity_show", kw_only=True):
    """`capacity show --profile P`: used lane refs, remaining slots, active reservations."""

    profile_id: str


class Reserve(_Workspaced, tag_field="op", tag="reserve", kw_only=True):
    """`reserve --id R --profile P --inbox I --batch-id B|--planning-attempt A --lane REF…`."""

    reservation_id: str
    profile_id: str
    inbox_id: str
    owner_id: str
    instance_id: str
    lane_refs: list[str]
    batch_id: str | None = None
    planning_attempt_id: str | None = None
    ttl_seconds: Int | None = None


class ReservationSettle(_Workspaced, tag_field="op", tag="reservation_settle", kw_only=True):
    """`reservation consume|release ID [--lane REF…]`: holds move forward only."""

    reservation_id: str
    state: str  # "consumed" | "released"
    owner_id: str
    instance_id: str
    lane_refs: list[str] | None = None


class ReservationShow(_Workspaced, tag_field="op", tag="reservation_show", kw_only=True):
    reservation_id: str


class LimitReport(_Workspaced, tag_field="op", tag="limit_report", kw_only=True):
    """`limit report --quota-host H --scope S [--resets-at T | --reset-unknown]`."""

    quota_host: str
    scope: str
    resets_at: str | None = None  # None: the reset time is unknown
    source: str = "manual"


class LimitClear(_Workspaced, tag_field="op", tag="limit_clear", kw_only=True):
    quota_host: str
    scope: str


class LimitList(_Workspaced, tag_field="op", tag="limit_list", kw_only=True):
    pass


Request = Union[
    Claim,
    Release,
    Takeover,
    FenceCheck,
    Heartbeat,
    RecordEvent,
    RegisterBatch,
    Status,
    BatchAudit,
    Gc,
    Version,
    ConfigShow,
    DaemonStatus,
    DaemonStop,
    Lanes,
    LanesStop,
    Doctor,
    BatchStop,
    BatchStopped,
    BatchBlock,
    BatchUnblock,
    BatchComplete,
    Health,
    Overview,
    Dashboard,
    OutboxList,
    OutboxFlush,
    WaitStopRequested,
    WaitUnblocked,
    WaitAnswered,
    Answer,
    Events,
    Ready,
    ClaimNext,
    WaitReady,
    UsageRecord,
    CapacityProfileSet,
    CapacityInboxSet,
    CapacityOccupancySet,
    CapacityShow,
    Reserve,
    ReservationSettle,
    ReservationShow,
    LimitReport,
    LimitClear,
    LimitList,
]
REQUEST_TYPES: tuple[type[_Request], ...] = Request.__args__  # type: ignore[attr-defined]

# ---- replies --------------------------------------------------------------------


class Progress(msgspec.Struct, tag_field="op", tag="progress", kw_only=True, omit_defaults=True):
    """An interim frame of a long command (gc progress, wait, status --watch)."""

    message: str = ""
    data: Any = None


class Response(msgspec.Struct, tag_field="op", tag="response", kw_only=True):
    exit_code: int
    payload: Any = None
    payload_json: bytes | None = None  # instead of payload, for a request with json_payload
    error: str | None = None  # one line for stderr when the command failed
    warnings: list[str] = []  # printed as `warning: …`
    notices: list[str] = []  # printed verbatim (e.g. the local-mode notice)
    daemon_version: str = DAEMON_VERSION
    protocol: int = PROTOCOL_VERSION


def payload_as_json(response: Response) -> Response:
    """The response with its payload JSON-encoded (`json_payload`), unless that would
    not fit a frame: then as it is (a client reads either)."""
    if response.payload is None:
        return response
    encoded = msgspec.json.encode(response.payload)
    if len(encoded) > MAX_RESPONSE_FRAME // 2:
        return response
    return msgspec.structs.replace(response, payload=None, payload_json=encoded)


def one_line_texts(response: Response) -> Response:
    """The response with its error, warnings and notices made one line each."""
    texts = [response.error or "", *response.warnings, *response.notices]
    if all(t.isprintable() for t in texts):
        return response
    return msgspec.structs.replace(
        response,
        error=None if response.error is None else one_line(response.error),
        warnings=[one_line(w) for w in response.warnings],
        notices=[one_line(n) for n in response.notices])


ClientFrame = Union[Hello, Request]  # one list of requests: a Union of Unions is flat
ServerFrame = Union[Welcome, Progress, Response]


# ---- where the two binaries meet ------------------------------------------------

SOCKET_NAME = "agentcoordd.sock"
# sun_path is 108 bytes on Linux, 104 on macOS (including the NUL).
MAX_SOCKET_PATH = 103


def state_home(env: Mapping[str, str]) -> str:
    """$XDG_STATE_HOME when absolute, else ~/.local/state (HOME from `env`)."""
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return xdg
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".local", "state")


def default_socket_path(env: Mapping[str, str]) -> str:
    """$AGENT_COORD_SOCKET, else $XDG_RUNTIME_DIR/agentcoord/agentcoordd.sock,
    else $XDG_STATE_HOME (or ~/.local/state)/agentcoord/run/agentcoordd.sock."""
    explicit = env.get("AGENT_COORD_SOCKET", "")
    if explicit:
        return explicit
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "agentcoord", SOCKET_NAME)
    return os.path.join(state_home(env), "agentcoord", "run", SOCKET_NAME)


def default_state_dir(env: Mapping[str, str]) -> str:
    """The daemon's own directory (logs, registered lanes): never coordination state."""
    return os.path.join(state_home(env), "agentcoord")


STATE_DIR_LOCK = "agentcoordd.lock"


def read_state_dir_owner(state_dir: str) -> dict[str, Any]:
    """What the daemon owning `state_dir` wrote into its lock: {"pid", "socket"} (or {})."""
    try:
        with open(os.path.join(state_dir, STATE_DIR_LOCK), "rb") as fh:
            owner = msgspec.json.decode(fh.read(4096) or b"{}")
    except (OSError, msgspec.DecodeError, RecursionError):
        return {}
    return owner if isinstance(owner, dict) else {}


def user_daemons_dir(env: Mapping[str, str]) -> str:
    """Where each running daemon of this user registers itself: under $HOME, never under
    XDG_*, so a shell and a host that differ in their XDG variables (an MCP host passes
    few) still find each other's daemon instead of starting a second one."""
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".local", "state", "agentcoord", "daemons")


def running_daemons(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """This user's registered daemons that still run: {"pid", "socket", "state_dir",
    "state_root"} each (a crashed daemon's entry is ignored: its pid is gone, or the state
    dir's lock names another, or its socket is gone)."""
    directory = user_daemons_dir(env)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(directory, name), "rb") as fh:
                entry = msgspec.json.decode(fh.read(4096))
            pid = entry["pid"]
            alive = (isinstance(pid, int) and pid > 0 and os.path.exists(entry["socket"])
                     and read_state_dir_owner(entry["state_dir"]).get("pid") == pid)
            if alive:
                os.kill(pid, 0)
                found.append(entry)
        except (OSError, msgspec.DecodeError, RecursionError, KeyError, TypeError):
            continue
    return found


# ---- framing --------------------------------------------------------------------


class FrameError(Exception):
    """The peer sent something that is not a frame we accept."""


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(HEADER, "big") + body


_frame_encoder = msgspec.msgpack.Encoder()


def encode_frame(message: Any) -> bytearray:
    """`frame(msgpack(message))` without copying the body once more (a full status reply
    is megabytes): encoded after a header that is filled in afterwards."""
    buf = bytearray(HEADER)
    _frame_encoder.encode_into(message, buf, HEADER)
    buf[:HEADER] = (len(buf) - HEADER).to_bytes(HEADER, "big")
    return buf


def frame_length(header: bytes, cap: int) -> int:
    size = int.from_bytes(header, "big")
    if size > cap:
        raise FrameError(f"frame of {size} bytes exceeds the {cap}-byte cap")
    return size


def encoder() -> msgspec.msgpack.Encoder:
    return msgspec.msgpack.Encoder()


def client_decoder() -> msgspec.msgpack.Decoder:
    """What ctl reads: Welcome, Progress or Response."""
    return msgspec.msgpack.Decoder(ServerFrame)


def server_decoder() -> msgspec.msgpack.Decoder:
    """What the daemon reads: Hello or one of the requests."""
    return msgspec.msgpack.Decoder(ClientFrame)


# ---- blocking helpers (ctl, raw test clients) -----------------------------------


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("daemon closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, cap: int = MAX_RESPONSE_FRAME) -> bytes:
    return recv_exactly(sock, frame_length(recv_exactly(sock, HEADER), cap))
