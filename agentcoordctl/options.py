"""Options shared by several commands — each group declared once (spec.Group) —
and the one way a command talks to the daemon and prints its answer."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from agentcoordctl import client
from agentcoordctl.render import printable
from agentcoordctl.spec import REQUIRED, Exit, Group, Opt
from agentcoordd import protocol as p
from agentcoordd.model.records import Metadata


class Globals:
    """Values of the app-level options (`--timeout` before or after the command)."""

    timeout: float | None = None


# ---- numbers ---------------------------------------------------------------------------

MAX_SECONDS = 100 * 365 * 86400.0


def seconds_at_least(minimum: float, *, strict: bool = False) -> Callable[[str], float]:
    """The parser of every seconds option: a finite number, at least `minimum` (above
    it when `strict`). NaN and infinities are usage errors, never a crash later."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number of seconds") from None
        low_ok = value > minimum if strict else value >= minimum
        if not (math.isfinite(value) and low_ok and value <= MAX_SECONDS):
            bound = f"{'above' if strict else 'at least'} {minimum:g}"
            raise ValueError(f"must be a finite number of seconds, {bound}: {text}")
        return value
    return parse


seconds = seconds_at_least(0.0)
positive_seconds = seconds_at_least(0.0, strict=True)

TIMEOUT = Opt("--timeout", "timeout", "custom", parse=positive_seconds, metavar="SECONDS",
              help="Bound every call (default: $AGENT_COORD_TIMEOUT or 30).")


# ---- groups: the backend selectors, the metadata options, output -------------------------

BACKEND = Group("selection", (
    Opt("--state-root", "state_root", metavar="PATH",
        help="Use this local state root (explicit local backend)."),
    Opt("--api-url", "api_url", metavar="URL", help="Use the HTTP state API at URL."),
    Opt("--etcd-endpoints", "etcd_endpoints", metavar="URLS", help="Use etcd at these endpoints."),
    Opt("--backend", "backend", metavar="OWNER/REPO",
        help="Legacy GitHub backend (not supported: exit 2)."),
), lambda v: p.Selection(**v))

_METADATA_HELP = {
    "thread_handle": ("Chat thread handle.", "HANDLE"), "chat_handle": ("Chat handle.", "HANDLE"),
    "host": ("Host app or machine.", "HOST"), "pr_url": ("Pull request URL.", "URL"),
    "dashboard_url": ("Dashboard deep link.", "URL"), "operator": ("Operator.", "NAME"),
    "phase": ("Work phase.", "PHASE"), "generation": ("Lane generation.", "N"),
    "instance_id": ("Agent instance id.", "ID"),
    "synthetic": ("Mark as synthetic (simulation, smoke).", None),
    "synthetic_kind": ("simulation, smoke, …", "KIND"),
    "route": ("Lane route: MODEL/EFFORT, or {\"model\": M, \"effort\": E} as JSON.",
              "MODEL/EFFORT"),
}


def metadata(fields: dict[str, Any]) -> Metadata:
    """The Metadata Struct from its options (the Struct is the one list of them)."""
    fields = dict(fields)
    fields["synthetic"] = True if fields.get("synthetic") else None
    return Metadata(**fields)


_METADATA_KIND: dict[str, Any] = {"synthetic": "flag", "generation": "int"}  # agent-coord's types
METADATA = Group("meta", tuple(
    Opt("--" + name.replace("_", "-"), name, _METADATA_KIND.get(name, "text"),
        metavar=_METADATA_HELP[name][1], help=_METADATA_HELP[name][0], panel="Metadata")
    for name in Metadata.__struct_fields__), metadata)

JSON = Opt("--json", "json", "flag", help="Machine-readable JSON on stdout.")


# ---- ids and common fields -------------------------------------------------------------

AGENT_ID = Opt("--agent-id", "agent_id", default=REQUIRED, metavar="ID", help="Stable agent id.")
OPT_AGENT_ID = Opt("--agent-id", "agent_id", metavar="ID", help="Agent id.")
REPO = Opt("--repo", "repo", default=REQUIRED, metavar="OWNER/REPO", help="Target repository.")
OPT_REPO = Opt("--repo", "repo", metavar="OWNER/REPO", help="Target repository.")
TARGET = Opt("--target", "target", default=REQUIRED, metavar="ISSUE_OR_PR", help="Issue or PR.")
OPT_TARGET = Opt("--target", "target", metavar="ISSUE_OR_PR", help="Issue or PR.")
BATCH_ID = Opt("--batch-id", "batch_id", metavar="ID", help="Batch id.")
BATCH_ID_REQUIRED = Opt("--batch-id", "batch_id", default=REQUIRED, metavar="ID", help="Batch id.")
BRANCH = Opt("--branch", "branch", metavar="BRANCH", help="Work branch.")
TTL = Opt("--ttl", "ttl", "int", metavar="SECONDS", saturate=True, help="Lease length.")


def eprint(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_NOTICES_SAID: set[str] = set()


def say_notices(response: p.Response) -> None:
    """A response's notices on stderr, each once per command: `run`, `wait` and the
    retries of one command make several requests, each answered with the same notices."""
    for notice in response.notices:
        line = printable(notice)
        if line not in _NOTICES_SAID:
            _NOTICES_SAID.add(line)
            eprint(line)


def dump_json(payload: Any) -> str:
    # msgspec, not json.dumps: a full status is megabytes, and ctl pays per call.
    return format_json(msgspec.json.encode(payload))


def format_json(encoded: bytes) -> str:
    return msgspec.json.format(encoded, indent=2).decode("utf-8")


def fail(message: str, code: int) -> Exit:
    eprint(message)
    return Exit(code)


# ---- running a request ----------------------------------------------------------------


class ProgressPrinter:
    """Progress of long commands on stderr: a redrawn line on a TTY, plain lines
    otherwise — and nothing for a command that finishes within a second."""

    QUIET_SECONDS = 1.0

    def __init__(self) -> None:
        self.started = time.monotonic()
        try:  # AGENT_COORD_PROGRESS_AFTER=0 shows every frame (tests, debugging)
            self.quiet = float(os.environ.get("AGENT_COORD_PROGRESS_AFTER", self.QUIET_SECONDS))
        except ValueError:
            self.quiet = self.QUIET_SECONDS
        self.tty = sys.stderr.isatty()
        self.drawn = False

    def __call__(self, frame: p.Progress) -> None:
        if not frame.message or time.monotonic() - self.started < self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + frame.message[:200])
            sys.stderr.flush()
            self.drawn = True
        else:
            eprint(frame.message)

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def send(message: Any, *, autostart: bool = True, path: str | None = None) -> p.Response:
    message.caller = client.caller()
    progress = ProgressPrinter()
    try:
        response, _welcome = client.request(
            message, timeout=Globals.timeout, autostart=autostart, path=path, on_progress=progress,
        )
    except client.ClientError as exc:
        raise fail(exc.message, exc.exit_code) from None
    finally:
        progress.close()
    return response


def show(response: p.Response, *, as_json: bool = False,
         text: Callable[[Any], str | None] | None = None) -> None:
    """Print notices, warnings, the error and the payload; exit with the response's code.
    Text (not JSON) shows stored values escaped: see `render.printable`."""
    say_notices(response)
    for line in diagnostics(response)[len(response.notices):]:
        eprint(line)
    out: str | None = None
    if response.payload_json is not None:  # asked for with json_payload: printed as sent
        out = format_json(response.payload_json)
    elif response.payload is not None:
        out = (dump_json(response.payload) if as_json or text is None
               else text(printable(response.payload)))
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    raise Exit(response.exit_code)


def diagnostics(response: p.Response) -> list[str]:
    """The stderr lines `show` prints for a response: notices, warnings, the error
    (also what agentcoord-mcp reports, so both say the same words)."""
    lines = [printable(notice) for notice in response.notices]
    lines.extend(f"warning: {printable(warning)}" for warning in response.warnings)
    if response.error:
        lines.append(printable(response.error))
    return lines


def json_output(response: p.Response) -> Any:
    """What `--json` prints on stdout for a response (None: nothing)."""
    return response.payload


def run(message: Any, *, as_json: bool = False, text: Callable[[Any], str | None] | None = None) -> None:
    message.json_payload = as_json or text is None
    show(send(message), as_json=as_json, text=text)
