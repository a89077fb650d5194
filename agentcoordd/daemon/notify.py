"""Notifications to people: events this daemon writes that match a configured
signal are sent to a webhook and/or a command (docs/notifications.md).

* Settings, per setting the first that gives it: the daemon's own environment,
  the consumer env files it reads (envfiles.py), `[notifications]` in
  agentcoordd.toml (config.py), the defaults. A bad value is one line in the
  log and in `doctor`; that setting falls back (or is off), the daemon runs.
* `notice(events)` runs before the reply of the command that wrote (or queued)
  them and after a late delivery from the event outbox: for each matching
  event and each configured target, one entry is appended (fsync) to
  `<state-dir>/notifications.jsonl` — the same durable Outbox as events, with
  its own capped exponential backoff — unless that (target, event) is already
  queued or delivered. A state dir that cannot take it (full, read-only) is the
  command's exit 2 (durable.StateDirError); any other problem is a warning in
  the log.
* Delivery (`Retrying.run`): webhook = POST of JSON {signal, event_id,
  batch_id, path, event} with `X-Agentcoord-Event-Id`; 2xx = delivered.
  Command = argv (shlex, no shell) with the same JSON on stdin; exit 0 =
  delivered. Both bounded by `timeout_seconds`. Delivered (target, path)
  keys are remembered in `notified.jsonl` (fsync) so a repeat is dropped; a
  SIGKILL between the receiver's 2xx and that record sends it once more
  after the restart (receivers dedupe on batch id + event id).
* One failure of a target in a round fails that round's other entries for it
  without trying them (one timeout per round, not one per entry).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agentcoordd import protocol as p
from agentcoordd.daemon import config as config_file
from agentcoordd.daemon.delivery import Retrying
from agentcoordd.daemon.durable import state_dir_error
from agentcoordd.daemon.outbox import Outbox, OutboxEntry
from agentcoordd.model.backoff import Backoff
from agentcoordd.model.typed_events import TYPED_EVENTS
from agentcoordd.store.files import locked_file, replace_private, write_all

DEFAULT_SIGNALS = ("help_requested", "escalation_requested", "error:P0", "error:P1",
                   "human_intervention", "batch.stop_requested", "batch.blocked", "lane_closed:abandoned",
                   "claim.released:holder_exited")
# `TYPE:VALUE` compares VALUE with this field of the event (any other type: `status`).
QUALIFIERS = {"error": "severity", "lane_closed": "terminal", "help_requested": "reason",
              "human_intervention": "kind", "lane.keepalive_ended": "reason",
              "claim.released": "release_mode"}
LANE_TERMINALS = ("done", "abandoned", "superseded")
ENV_NAMES = {"webhook": "AGENT_COORD_NOTIFY_WEBHOOK", "command": "AGENT_COORD_NOTIFY_COMMAND",
             "signals": "AGENT_COORD_NOTIFY_SIGNALS", "timeout": "AGENT_COORD_NOTIFY_TIMEOUT",
             "backoff_cap": "AGENT_COORD_NOTIFY_BACKOFF_CAP"}
TOML_NAMES = {"webhook": "webhook", "command": "command", "signals": "signals",
              "timeout": "timeout_seconds", "backoff_cap": "backoff_cap_seconds"}
DEFAULT_TIMEOUT = 10.0
DEFAULT_BACKOFF_CAP = 300.0
FIRST_BACKOFF = 2.0
MAX_REMEMBERED = 20_000  # delivered keys kept for dedupe (the file is compacted past twice that)
EVENT_ID_HEADER = "X-Agentcoord-Event-Id"
_SIGNAL = re.compile(r"[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?")
TARGETS = ("webhook", "command")


# ---- settings -----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    webhook: str | None = None
    command: tuple[str, ...] | None = None
    signals: tuple[str, ...] = DEFAULT_SIGNALS
    timeout: float = DEFAULT_TIMEOUT
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    sources: dict[str, str] = field(default_factory=dict)  # setting -> where it came from
    errors: tuple[str, ...] = ()
    config_path: str | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for t in TARGETS if getattr(self, t))

    def describe(self) -> dict[str, Any]:
        """For `config show` and `doctor`: never a secret in full (a webhook URL's path
        and query, a command's arguments may hold one)."""
        return {
            "configured": bool(self.targets),
            "webhook": redact_url(self.webhook) if self.webhook else None,
            "command": redact_command(self.command) if self.command else None,
            "signals": list(self.signals),
            "timeout_seconds": self.timeout,
            "backoff_cap_seconds": self.backoff_cap,
            "sources": dict(self.sources),
            "config_file": self.config_path,
            "errors": list(self.errors),
        }


def redact_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{parts.scheme}://{host}/{'…' if hidden else ''}"


def redact_command(argv: tuple[str, ...]) -> str:
    return argv[0] + (f" … ({len(argv) - 1} argument{'s' if len(argv) > 2 else ''})"
                      if len(argv) > 1 else "")


def load_settings(env: Mapping[str, str], config_flag: str | None = None) -> Settings:
    """The notification settings of a daemon with this environment (and --config)."""
    found = config_file.layered(env, config_flag, "notifications", ENV_NAMES, TOML_NAMES)
    values, sources, errors = config_file.parsed(found, PARSERS)
    return Settings(**values, sources=sources, errors=tuple(errors),
                    config_path=found.config_path)


def _webhook(value: Any) -> tuple[str | None, str | None]:
    if not isinstance(value, str):
        return None, "must be a string (webhook off)"
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None, f"not an http(s) URL: {redact_url(value.strip())!r} (webhook off)"
    return value.strip(), None


def _command(value: Any) -> tuple[tuple[str, ...] | None, str | None]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = value
    elif isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            return None, f"cannot be split into arguments ({exc}) (command off)"
    else:
        return None, "must be a string or a list of strings (command off)"
    if not argv or not argv[0]:
        return None, "is empty (command off)"
    return tuple(argv), None


def _signals(value: Any) -> tuple[tuple[str, ...] | None, str | None]:
    if isinstance(value, str):
        items = [v for v in re.split(r"[\s,]+", value) if v]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        return None, "must be a list of signal names (using the defaults)"
    out: list[str] = []
    bad: list[str] = []
    for item in items:
        if item == "default":
            out += [s for s in DEFAULT_SIGNALS if s not in out]
        elif signal_problem(item) is not None:
            bad.append(item)
        elif item not in out:
            out.append(item)
    problem = None
    if bad:
        problem = f"unknown signal {bad[0]!r}: {signal_problem(bad[0])}" + (
            f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + " (ignored)"
    if not out:
        return None, (problem or "no signal named") + "; using the defaults"
    return tuple(out), problem


def signal_problem(item: str) -> str | None:
    if not _SIGNAL.fullmatch(item):
        return "expected TYPE or TYPE:VALUE (letters, digits, _ . -)"
    kind, _, value = item.partition(":")
    allowed: tuple[str, ...] | None = None
    if kind == "lane_closed":
        allowed = LANE_TERMINALS
    elif kind in TYPED_EVENTS and kind in QUALIFIERS:
        allowed = TYPED_EVENTS[kind].get(QUALIFIERS[kind])
    if value and allowed is not None and value not in allowed:
        return f"{QUALIFIERS[kind]} of {kind} is one of {', '.join(allowed)}"
    return None


def _seconds(value: Any) -> tuple[float | None, str | None]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (0 < number < 1e9) or isinstance(value, bool):
        return None, f"must be a positive number of seconds, not {value!r} (using the default)"
    return number, None


PARSERS = {"webhook": _webhook, "command": _command, "signals": _signals, "timeout": _seconds,
           "backoff_cap": _seconds}


def matching_signal(record: dict[str, Any], signals: tuple[str, ...]) -> str | None:
    """The first configured signal this event record matches."""
    event_type = record.get("type")
    for signal in signals:
        kind, _, value = signal.partition(":")
        if kind != event_type:
            continue
        if not value or record.get(QUALIFIERS.get(kind, "status")) == value:
            return signal
    return None


# ---- delivered keys -------------------------------------------------------------------


class Sent:
    """(target, event path) keys delivered, one JSON line each in notified.jsonl (fsync'd)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "notified.jsonl"
        self._lock = threading.Lock()
        self.keys: dict[str, float] = {}
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        self.lines = 0
        for line in raw.splitlines():
            try:
                item = json.loads(line)
                self.keys[str(item["key"])] = float(item["at"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line: that key is sent again at worst
            self.lines += 1

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def add(self, key: str, at: float) -> None:
        with self._lock:
            self.keys[key] = at
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with locked_file(self.path):
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    write_all(fd, json.dumps({"key": key, "at": at}).encode() + b"\n")
                finally:
                    os.close(fd)
                self.lines += 1
                if self.lines > 2 * MAX_REMEMBERED:
                    newest = sorted(self.keys.items(), key=lambda kv: kv[1])[-MAX_REMEMBERED:]
                    self.keys = dict(newest)
                    replace_private(self.path, b"".join(
                        json.dumps({"key": k, "at": t}).encode() + b"\n" for k, t in newest))
                    self.lines = len(newest)


def key_of(target: str, path: str) -> str:
    return f"{target}:{path}"


class DeliveryFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotSent(DeliveryFailed):
    """Not attempted (or cut off): this target failed or hung in this round."""


# ---- the notifier ---------------------------------------------------------------------


class Notifier(Retrying):
    label = "notifications"

    def __init__(self, *, state_dir: str, log: Any = None, env: Mapping[str, str] | None = None,
                 config_flag: str | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.config_flag = config_flag
        self.settings = load_settings(self.env, config_flag)
        super().__init__(Outbox(state_dir, name="notifications", backoff=self._backoff()), log)
        self.sent = Sent(state_dir)
        self._signature = self._current_signature()
        self._down: dict[str, str] = {}
        self._http: Any = None
        self._report()

    # ---- configuration ----------------------------------------------------------------

    def _backoff(self) -> Backoff:
        return Backoff(first=min(FIRST_BACKOFF, self.settings.backoff_cap),
                       cap=self.settings.backoff_cap)

    def _current_signature(self) -> tuple[Any, ...]:
        return config_file.signature(config_file.layered_paths(self.env, self.config_flag))

    def _report(self) -> None:
        s = self.settings
        for error in s.errors:
            self._log("error", f"notification configuration: {error}")
        if s.targets:
            self._log("info", "notifications configured", **s.describe())

    def current(self) -> Settings:
        """The settings, re-read first if one of their files changed (a few stats)."""
        self.reload_if_changed()
        return self.settings

    def reload_if_changed(self) -> None:
        signature = self._current_signature()
        if signature == self._signature:
            return
        self._signature = signature
        self.settings = load_settings(self.env, self.config_flag)
        self.outbox.backoff = self._backoff()
        self._log("info", "notification configuration reloaded")
        self._report()

    def round_started(self) -> None:
        self._down.clear()
        self.reload_if_changed()

    # ---- queueing ---------------------------------------------------------------------

    async def notice(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Queue a notification for every matching event (fsync'd). Raises StateDirError
        when the state dir cannot take one (the command is then exit 2: its exit 0
        would promise a notification that is nowhere); any other problem is logged."""
        if not events:
            return
        try:
            settings = self.current()
            if not settings.targets:
                return
            matched = [(path, record, signal) for path, record in events
                       if isinstance(record, dict)
                       and (signal := matching_signal(record, settings.signals))]
            if not matched:
                return
            with anyio.CancelScope(shield=True):  # a reply never races the append
                queued = await anyio.to_thread.run_sync(self._append, matched, settings.targets)
            if queued:
                self.queued += queued
                self.wake()
        except OSError as exc:
            self._log("error", "notification not queued", error=repr(exc))
            raise state_dir_error(self.outbox.dir, f"the notification of {events[0][0]} could not "
                                  "be queued", exc) from None
        except Exception as exc:  # noqa: BLE001 - a bug here never fails the write that caused it
            self._log("warning", "notification not queued", error=repr(exc))

    def _append(self, matched: list[tuple[str, dict[str, Any], str]],
                targets: tuple[str, ...]) -> int:
        pending = {key_of(e.backend.get("kind", ""), e.path) for e in self.outbox.entries()}
        queued = 0
        for path, record, signal in matched:
            for target in targets:
                key = key_of(target, path)
                if key in pending or key in self.sent:
                    continue  # at most once per (target, event): dedupe by event
                self.outbox.append(path, record, {"kind": target, "key": f"notify:{target}"},
                                   signal=signal)
                pending.add(key)
                queued += 1
                self._log("info", "notification queued", target=target, signal=signal,
                          path=path, event_id=record.get("event_id"))
        return queued

    async def on_event_delivered(self, path: str, record: dict[str, Any]) -> None:
        await self.notice([(path, record)])

    # ---- delivering -------------------------------------------------------------------

    async def deliver(self, entry: OutboxEntry) -> None:
        target = str(entry.backend.get("kind"))
        key = key_of(target, entry.path)
        if key in self.sent:
            return  # delivered before (a repeat): dropped
        if target not in self.settings.targets:
            self._log("warning", "notification dropped: target no longer configured",
                      target=target, path=entry.path)
            return
        if target in self._down:
            raise NotSent(f"not tried: {target} failed earlier in this round ({self._down[target]})")
        body = json.dumps(payload(entry)).encode()
        try:
            with anyio.fail_after(self.settings.timeout):
                if target == "webhook":
                    await self._post(entry, body)
                else:
                    await self._run(entry, body)
        except TimeoutError:
            self._down[target] = f"no answer within {self.settings.timeout:g}s"
            raise NotSent(self._down[target]) from None
        except Exception as exc:
            self._down[target] = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            raise DeliveryFailed(self._down[target]) from exc
        await anyio.to_thread.run_sync(self.sent.add, key, self.outbox.clock())
        self._log("info", "notification delivered", target=target, signal=entry.signal,
                  path=entry.path, attempts=entry.attempts + 1)

    async def _post(self, entry: OutboxEntry, body: bytes) -> None:
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(follow_redirects=False)
        response = await self._http.post(
            self.settings.webhook or "", content=body, timeout=self.settings.timeout,
            headers={"Content-Type": "application/json", "User-Agent": f"agentcoordd/{p.DAEMON_VERSION}",
                     EVENT_ID_HEADER: str(entry.record.get("event_id", "")),
                     "X-Agentcoord-Batch-Id": str(entry.record.get("batch_id", "")),
                     "X-Agentcoord-Signal": entry.signal or ""})
        if not 200 <= response.status_code < 300:
            raise DeliveryFailed(f"webhook answered HTTP {response.status_code}")

    async def _run(self, entry: OutboxEntry, body: bytes) -> None:
        import subprocess

        argv = list(self.settings.command or ())
        env = {**self.env, "AGENTCOORD_SIGNAL": entry.signal or "",
               "AGENTCOORD_EVENT_ID": str(entry.record.get("event_id", "")),
               "AGENTCOORD_BATCH_ID": str(entry.record.get("batch_id", ""))}
        try:
            process = await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, env=env,
                                               cwd=str(self.outbox.dir))
        except OSError as exc:
            raise DeliveryFailed(f"command {argv[0]!r} could not start: {exc.strerror or exc}") from None
        errors = bytearray()
        async with process:  # a timeout (the caller's fail_after) kills it
            assert process.stdin is not None and process.stderr is not None
            try:
                await process.stdin.send(body)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the command need not read its stdin
            await process.stdin.aclose()
            async for chunk in process.stderr:
                errors += chunk[:max(0, 4096 - len(errors))]
            code = await process.wait()
        if code != 0:
            tail = " ".join(errors.decode("utf-8", "replace").split())[-200:]
            raise DeliveryFailed(f"command exited {code}" + (f": {tail}" if tail else ""))

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # ---- introspection ----------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        now = self.outbox.clock()
        return [{
            "kind": "notification", "target": e.backend.get("kind"), "signal": e.signal,
            "path": e.path, "batch_id": e.record.get("batch_id"), "type": e.record.get("type"),
            "event_id": e.record.get("event_id"), "age_seconds": round(now - e.queued_at, 3),
            "attempts": e.attempts, "last_error": e.last_error,
            "next_try_in": round(max(0.0, self.outbox.next_try(e) - now), 3),
        } for e in self.outbox.entries()]

    def summary(self) -> dict[str, Any]:
        rows = self.rows()
        return {**self.current().describe(), "path": str(self.outbox.path), "depth": len(rows),
                "delivered": self.delivered, "failing": sum(1 for r in rows if r["attempts"])}


def payload(entry: OutboxEntry) -> dict[str, Any]:
    """What a receiver gets: the signal, the ids to dedupe on, the event record itself."""
    return {"signal": entry.signal, "event_id": entry.record.get("event_id"),
            "batch_id": entry.record.get("batch_id"), "path": entry.path, "event": entry.record}
