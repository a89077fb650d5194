"""`agentcoordctl`: the thin client agents run; same commands, flags and exit
codes as `agent-coord`.

Start-up time is the product here (an agent pays it on every call), so only
the invoked command's module is imported and registered; `--help` without a
command registers them all. Usage errors exit 1 as the spec says (click's
default is 2).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Annotated, Any, Optional

import typer

from agentcoordctl import output
from agentcoordctl.options import Globals, positive_seconds

# command name -> module whose register(app) adds it
COMMANDS = {
    "claim": "agentcoordctl.claims",
    "release": "agentcoordctl.claims",
    "heartbeat": "agentcoordctl.heartbeat",
    "register-batch": "agentcoordctl.batches",
    "record-event": "agentcoordctl.events",
    "status": "agentcoordctl.status",
    "batch-audit": "agentcoordctl.batches",
    "batch": "agentcoordctl.batchctl",
    "health": "agentcoordctl.health",
    "dashboard": "agentcoordctl.dashboard",
    "version": "agentcoordctl.info",
    "config": "agentcoordctl.info",
    "daemon": "agentcoordctl.daemonctl",
    "gc": "agentcoordctl.gc",
    "doctor": "agentcoordctl.doctor",
    "token": "agentcoordctl.tokens",
    "demo": "agentcoordctl.demo",
    "lanes": "agentcoordctl.lanes",
    "outbox": "agentcoordctl.outbox",
    "run": "agentcoordctl.runcmd",
    "wait": "agentcoordctl.wait",
    "service": "agentcoordctl.service",
    "bootstrap": "agentcoordctl.bootstrap",
    "validate": "agentcoordctl.validate",
}
GLOBAL_OPTIONS_WITH_VALUE = ("--timeout",)
CLICK_USAGE_EXIT = 2  # typer's usage errors (bad option, missing value) carry click's code


def _callback(
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS", parser=positive_seconds,
        help="Bound every call (default: $AGENT_COORD_TIMEOUT or 30).")] = None,
) -> None:
    """agentcoordctl: coordinate AI coding agents through the per-machine agentcoordd."""
    if timeout is not None:
        Globals.timeout = timeout


def _invoked(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in GLOBAL_OPTIONS_WITH_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def build_app(command: str | None = None) -> typer.Typer:
    app = typer.Typer(
        name="agentcoordctl",
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_callback)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    out, _err = output.install()
    return output.exit_code(_run(args), out)


def _run(args: list[str]) -> int:
    """The command's exit code; nothing it raises escapes as a traceback."""
    for arg in args:  # argv bytes that are not UTF-8 arrive as lone surrogates
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            print("agentcoordctl: invalid argument: not valid UTF-8 (agentcoordctl takes UTF-8 "
                  "text only)", file=sys.stderr)
            return 1
    try:
        app = build_app(_invoked(args))
        rv = typer.main.get_command(app).main(args, prog_name="agentcoordctl",
                                               standalone_mode=False)
    except typer.TyperException as exc:
        if getattr(exc, "exit_code", 1) == CLICK_USAGE_EXIT:  # click would exit 2; the spec says 1
            print(usage_line(exc), file=sys.stderr)
            return 1
        print(f"agentcoordctl: {exc.format_message()}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, exit 2, never a traceback
        if os.environ.get("AGENT_COORD_DEBUG"):
            traceback.print_exc()
        detail = " ".join(str(exc).split())[:300]
        print(f"agentcoordctl: internal error: {type(exc).__name__}: {detail}; coordination state "
              "is UNKNOWN (AGENT_COORD_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    return rv if isinstance(rv, int) else 0


def usage_line(exc: Any) -> str:
    """One line instead of click's Usage/Try/Error block: what is wrong and where help is."""
    where = exc.ctx.command_path if exc.ctx is not None else "agentcoordctl"
    message = " ".join(exc.format_message().split())
    return f"{where}: {message} (see '{where} -h')"


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
