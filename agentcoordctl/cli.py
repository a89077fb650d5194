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
from typing import Annotated, Any, Optional

import typer

from agentcoordctl.options import Globals

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


def _callback(
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS",
        help="Bound every call (default: $AGENT_COORD_TIMEOUT or 30).")] = None,
) -> None:
    """agentcoordctl: coordinate AI coding agents through the per-machine agentcoordd."""
    if timeout is not None:
        if timeout <= 0:
            raise typer.BadParameter("must be positive", param_hint="--timeout")
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
    app = build_app(_invoked(args))
    command = typer.main.get_command(app)
    from typer import _click

    try:
        rv = command.main(args, prog_name="agentcoordctl", standalone_mode=False)
    except _click.exceptions.UsageError as exc:  # click would exit 2; the spec says 1
        print(usage_line(exc), file=sys.stderr)
        return 1
    except _click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except _click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
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
