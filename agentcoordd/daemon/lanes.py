"""Keep-alive lane registrations: what is persisted, and the processes lanes watch.

Registered lanes are written atomically to `<state-dir>/lanes.json` (0600) so a
restarted daemon resumes them; the file holds the backend *selection* of each
lane, never a token. A watched process is identified by pid *and* its start
time, so a recycled pid is not mistaken for the agent.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd.coord.keepalive import Fence
from agentcoordd.store.files import locked_file, process_exists, replace_private

DEFAULT_AGENT_HOSTS = ("codex", "claude")


class LaneSpec(msgspec.Struct, omit_defaults=True):
    agent_id: str
    ttl: int
    renew_every: float
    idle_timeout: float
    backend: dict[str, Any]
    repo: str | None = None
    target: str | None = None
    batch_id: str | None = None
    fence: Fence | None = None
    watch_pid: int | None = None
    watch_pid_start: int | None = None
    registered_at: str | None = None
    # persisted "last touched" as wall time: the boot-time clock restarts on reboot
    touched_wall: float | None = None
    lane: str | None = None  # the batch lane its claim is (claim --next; else looked up when needed)
    # When the watched process exits: "release" its claim on its behalf, or "keep" it
    # (the claim then waits out its heartbeat, as before agentcoord released).
    on_exit: str = "release"
    # The process exited and the claim is not released yet: kept in the file until it is,
    # so a restart finishes the release.
    release_pending: bool = False
    # who registered it (coord.trust: stopping another's lane needs --force)
    machine_id: str | None = None
    session_id: str | None = None

    @property
    def key(self) -> str:
        return f"{self.backend.get('key', '')}|{self.agent_id}"


class LaneFile(msgspec.Struct):
    version: int = 1
    lanes: list[LaneSpec] = []


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(LaneFile)


class LaneRegistry:
    """Load/save the set of registered lanes atomically."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "lanes.json"

    def load(self) -> tuple[list[LaneSpec], str | None]:
        """The saved lanes, and a warning when the file had to be set aside."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return [], None
        try:
            return _decoder.decode(raw).lanes, None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            aside = self.path.with_name("lanes.json.corrupt")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return [], f"lanes file unreadable ({exc}); moved to {aside}"

    def save(self, lanes: list[LaneSpec]) -> None:
        for lane in lanes:
            if any("token" in k.lower() and k != "token_hash" for k in lane.backend):
                raise ValueError("lane registrations never carry a token")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locked_file(self.path):  # the state-dir lock makes one daemon its writer; belt and braces
            replace_private(self.path, _encoder.encode(LaneFile(lanes=lanes)))


# ---- watched processes --------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: split after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot (Linux); None where unavailable."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """The process exists (and is the same one it was, when start_time is known)."""
    if not process_exists(pid):
        return False
    fields = _stat_fields(pid)
    if fields and fields[0] == "Z":
        return False  # a zombie has exited; its parent just has not reaped it
    if start_time is not None:
        current = process_start_time(pid)
        if current is not None and current != start_time:
            return False
    return True


def _executable_name(pid: int) -> str:
    with contextlib.suppress(OSError):
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    with contextlib.suppress(OSError):
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        return os.path.basename(argv0.decode("utf-8", "replace"))
    return ""


def _command_words(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
        return [os.path.basename(a.decode("utf-8", "replace")) for a in args if a]
    return []


def find_agent_ancestor(pid: int, hosts: tuple[str, ...] = DEFAULT_AGENT_HOSTS) -> int | None:
    """The nearest ancestor of `pid` whose executable (or script) is an agent host.

    Node-based hosts run as `node /path/to/codex`, so the first argument counts
    as well as the executable.
    """
    seen: set[int] = set()
    current = parent_pid(pid)
    while current and current > 1 and current not in seen:
        seen.add(current)
        names = [_executable_name(current), *_command_words(current)]
        if any(name == host or name.startswith(host + "-") for name in names for host in hosts):
            return current
        current = parent_pid(current)
    return None
