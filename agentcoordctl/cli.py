"""`agentcoordctl`: the thin client agents run; same commands, flags and exit
codes as `agent-coord`.

Start-up time is the product here (an agent pays it on every call): only the
invoked command's module is imported, and its declaration (agentcoordctl/spec.py)
is parsed without typer. Help, and any argument list the fast parser does not
take, go to the typer app built from the same declarations (typer_app.py),
which prints help or the usage error; usage errors exit 1 as the spec says
(click's default is 2).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from agentcoordctl import output, spec
from agentcoordctl.options import TIMEOUT, Globals

# command name -> module whose COMMANDS declare it
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
CLICK_USAGE_EXIT = 2  # typer's usage errors (bad option, missing value) carry click's code


def declarations(name: str | None = None) -> list[spec.Command]:
    """The commands of one name (its module's), or of every module."""
    modules = [COMMANDS[name]] if name in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    found: list[spec.Command] = []
    for module in modules:
        found.extend(importlib.import_module(module).COMMANDS)
    return found


def split_globals(args: Sequence[str]) -> tuple[dict[str, Any], list[str]] | None:
    """(app-level options, the words from the command on); None: typer must look."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, text = args[i].partition("=")
        if name != TIMEOUT.name:
            return None  # help, --version, an unknown option: typer answers
        if not eq:
            if i + 1 >= len(args):
                return None
            i += 1
            text = args[i]
        try:
            values[TIMEOUT.dest] = spec.convert(TIMEOUT, text)
        except spec.UsageProblem:
            return None
        i += 1
    return values, list(args[i:])


def find(words: Sequence[str]) -> tuple[spec.Command, list[str]] | None:
    """The declared command the words name, and the words after its name."""
    if not words or words[0] not in COMMANDS:
        return None
    for command in declarations(words[0]):
        size = len(command.path)
        if tuple(words[:size]) == command.path:
            return command, list(words[size:])
    return None


def fast(args: list[str]) -> int | None:
    """Parse and run without typer; None when typer must handle the argument list."""
    split = split_globals(args)
    if split is None:
        return None
    global_values, words = split
    found = find(words)
    if found is None:
        return None
    command, rest = found
    try:
        values = spec.parse(command, rest)
    except spec.UsageProblem:
        return None
    Globals.timeout = global_values.get(TIMEOUT.dest, Globals.timeout)
    return _ran(command.run(**values))


def with_typer(args: list[str]) -> int:
    """Help, and every argument list the fast parser refused: typer parses and prints."""
    import typer

    from agentcoordctl import typer_app

    words = (split_globals(args) or ({}, args))[1]
    name = words[0] if words else None
    app = typer_app.build(declarations(name), TIMEOUT, _set_timeout)
    found = find(words)
    try:
        rv = typer.main.get_command(app).main(args, prog_name="agentcoordctl",
                                               standalone_mode=False)
    except typer.TyperException as exc:
        code = getattr(exc, "exit_code", 1)
        if code == CLICK_USAGE_EXIT:  # click would exit 2; the spec says 1
            print(usage_line(exc), file=sys.stderr)
            usage_exit = found[0].usage_exit if found else None
            return usage_exit(args) if usage_exit else 1
        print(f"agentcoordctl: {exc.format_message()}", file=sys.stderr)
        return code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    return _ran(rv)


def _set_timeout(value: float | None) -> None:
    if value is not None:
        Globals.timeout = value


def _ran(rv: Any) -> int:
    return rv if isinstance(rv, int) else 0


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
        code = fast(args)
        return with_typer(args) if code is None else code
    except spec.Exit as done:
        return done.code
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


def usage_line(exc: Any) -> str:
    """One line instead of click's Usage/Try/Error block: what is wrong and where help is."""
    where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "agentcoordctl"
    message = " ".join(exc.format_message().split())
    return f"{where}: {message} (see '{where} -h')"


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
