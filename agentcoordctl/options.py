"""Options shared by several commands, and the one way a command talks to the
daemon and prints its answer."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, Optional

import msgspec
import typer

from agentcoordctl import client
from agentcoordctl.render import printable
from agentcoordd import protocol as p
from agentcoordd.model.records import Metadata


class Globals:
    """Values of the app-level options (set by the app callback)."""

    timeout: float | None = None


# ---- numbers ---------------------------------------------------------------------------

MAX_SECONDS = 100 * 365 * 86400.0


def seconds_at_least(minimum: float, *, strict: bool = False) -> Callable[[str], float]:
    """The `parser=` of every seconds option: a finite number, at least `minimum`
    (above it when `strict`). NaN and infinities are usage errors, never a crash later."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number of seconds") from None
        low_ok = value > minimum if strict else value >= minimum
        if not (math.isfinite(value) and low_ok and value <= MAX_SECONDS):
            bound = f"{'above' if strict else 'at least'} {minimum:g}"
            raise typer.BadParameter(f"must be a finite number of seconds, {bound}: {text}")
        return value
    return parse


seconds = seconds_at_least(0.0)
positive_seconds = seconds_at_least(0.0, strict=True)


# ---- backend selectors ---------------------------------------------------------------

StateRoot = Annotated[Optional[str], typer.Option(
    "--state-root", metavar="PATH", help="Use this local state root (explicit local backend).")]
ApiUrl = Annotated[Optional[str], typer.Option(
    "--api-url", metavar="URL", help="Use the HTTP state API at URL.")]
EtcdEndpoints = Annotated[Optional[str], typer.Option(
    "--etcd-endpoints", metavar="URLS", help="Use etcd at these endpoints.")]
LegacyBackend = Annotated[Optional[str], typer.Option(
    "--backend", metavar="OWNER/REPO", help="Legacy GitHub backend (not supported: exit 2).")]


def selection(state_root: str | None, api_url: str | None, etcd_endpoints: str | None,
              backend: str | None) -> p.Selection:
    return p.Selection(state_root=state_root, api_url=api_url, etcd_endpoints=etcd_endpoints,
                       backend=backend)


# ---- ids and common fields -------------------------------------------------------------

AgentId = Annotated[str, typer.Option("--agent-id", metavar="ID", help="Stable agent id.")]
OptAgentId = Annotated[Optional[str], typer.Option("--agent-id", metavar="ID", help="Agent id.")]
Repo = Annotated[str, typer.Option("--repo", metavar="OWNER/REPO", help="Target repository.")]
OptRepo = Annotated[Optional[str], typer.Option("--repo", metavar="OWNER/REPO",
                                                help="Target repository.")]
Target = Annotated[str, typer.Option("--target", metavar="ISSUE_OR_PR", help="Issue or PR.")]
OptTarget = Annotated[Optional[str], typer.Option("--target", metavar="ISSUE_OR_PR",
                                                  help="Issue or PR.")]
BatchId = Annotated[Optional[str], typer.Option("--batch-id", metavar="ID", help="Batch id.")]
Branch = Annotated[Optional[str], typer.Option("--branch", metavar="BRANCH", help="Work branch.")]
Ttl = Annotated[Optional[int], typer.Option("--ttl", metavar="SECONDS", help="Lease length.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

# ---- metadata options (claim, heartbeat, release, record-event) ------------------------

ThreadHandle = Annotated[Optional[str], typer.Option("--thread-handle", help="Chat thread handle.",
                                                     rich_help_panel="Metadata")]
ChatHandle = Annotated[Optional[str], typer.Option("--chat-handle", help="Chat handle.",
                                                   rich_help_panel="Metadata")]
Host = Annotated[Optional[str], typer.Option("--host", help="Host app or machine.",
                                             rich_help_panel="Metadata")]
PrUrl = Annotated[Optional[str], typer.Option("--pr-url", metavar="URL", help="Pull request URL.",
                                              rich_help_panel="Metadata")]
DashboardUrl = Annotated[Optional[str], typer.Option("--dashboard-url", metavar="URL",
                                                     help="Dashboard deep link.",
                                                     rich_help_panel="Metadata")]
Operator = Annotated[Optional[str], typer.Option("--operator", help="Operator.",
                                                 rich_help_panel="Metadata")]
Phase = Annotated[Optional[str], typer.Option("--phase", help="Work phase.",
                                              rich_help_panel="Metadata")]
Generation = Annotated[Optional[str], typer.Option("--generation", help="Lane generation.",
                                                   rich_help_panel="Metadata")]
InstanceId = Annotated[Optional[str], typer.Option("--instance-id", help="Agent instance id.",
                                                   rich_help_panel="Metadata")]
Synthetic = Annotated[bool, typer.Option("--synthetic", help="Mark as synthetic (simulation, smoke).",
                                         rich_help_panel="Metadata")]
SyntheticKind = Annotated[Optional[str], typer.Option("--synthetic-kind", metavar="KIND",
                                                      help="simulation, smoke, …",
                                                      rich_help_panel="Metadata")]


def metadata(options: dict[str, Any]) -> Metadata:
    """The metadata options of a command, picked by name from its parameters
    (`metadata(locals())`): the Metadata Struct is the one list of them."""
    fields = {name: options.get(name) for name in Metadata.__struct_fields__}
    generation = fields["generation"]
    if isinstance(generation, str) and generation.isascii() and generation.isdigit():
        fields["generation"] = int(generation)
    fields["synthetic"] = True if fields["synthetic"] else None
    return Metadata(**fields)


# ---- running a request ----------------------------------------------------------------


def eprint(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def dump_json(payload: Any) -> str:
    # msgspec, not json.dumps: a full status is megabytes, and ctl pays per call.
    return msgspec.json.format(msgspec.json.encode(payload), indent=2).decode("utf-8")


def fail(message: str, code: int) -> typer.Exit:
    eprint(message)
    return typer.Exit(code)


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
    for notice in response.notices:
        eprint(printable(notice))
    for warning in response.warnings:
        eprint(f"warning: {printable(warning)}")
    if response.error:
        eprint(printable(response.error))
    if response.payload is not None:
        out = (dump_json(response.payload) if as_json or text is None
               else text(printable(response.payload)))
        if out:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
    raise typer.Exit(response.exit_code)


def run(message: Any, *, as_json: bool = False, text: Callable[[Any], str | None] | None = None) -> None:
    show(send(message), as_json=as_json, text=text)
