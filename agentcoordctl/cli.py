"""`agentcoordctl`: the thin client agents run; same commands, flags and exit
codes as `agent-coord`.

Start-up time is the product here (an agent pays it on every call): only the
invoked command's module is imported, and its declaration (agentcoordctl/spec.py)
is parsed without typer, by agent-coord's rules and with its error words.
Only help loads typer, to render the same declarations.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from agentcoordctl import output, spec
from agentcoordctl.render import printable
from agentcoordctl.options import TIMEOUT, Globals

# command name -> module whose COMMANDS declare it
COMMANDS = {
    "claim": "agentcoordctl.claims",
    "release": "agentcoordctl.claims",
    "takeover": "agentcoordctl.takeover",
    "fence": "agentcoordctl.fence",
    "heartbeat": "agentcoordctl.heartbeat",
    "register-batch": "agentcoordctl.batches",
    "record-event": "agentcoordctl.events",
    "status": "agentcoordctl.status",
    "batch-audit": "agentcoordctl.batches",
    "batch": "agentcoordctl.batchctl",
    "usage": "agentcoordctl.usage",
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
    "answer": "agentcoordctl.answer",
    "events": "agentcoordctl.feed",
    "ready": "agentcoordctl.ready",
    "capacity": "agentcoordctl.capacity",
    "reserve": "agentcoordctl.capacity",
    "reservation": "agentcoordctl.capacity",
    "limit": "agentcoordctl.limits",
    "docs": "agentcoordctl.docs",
}
HELP_WORDS = ("-h", "--help", "help")
# `agentcoordctl --version` is `agentcoordctl version` (what it prints, its exit code).
VERSION = spec.Opt("--version", "version", "flag", help="Print what `agentcoordctl version` prints.")
GROUPS = ("batch", "token", "fence", "capacity", "reservation", "limit")  # commands that are only a name for their subcommands


def declarations(name: str | None = None) -> list[spec.Command]:
    """The commands of one name (its module's), or of every module."""
    modules = [COMMANDS[name]] if name in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    found: list[spec.Command] = []
    for module in modules:
        found.extend(importlib.import_module(module).COMMANDS)
    return found


def split_globals(args: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """(app-level options before the command, the words from the command on)."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args) and args[i].partition("=")[0] == TIMEOUT.name:
        shown, eq, text = args[i].partition("=")
        if eq:
            shown = args[i]
        elif i + 1 < len(args):
            i += 1
            text = args[i]
            shown = f"{shown} {text}"
        else:
            raise spec.UsageProblem(f"missing argument: {shown}")
        try:
            values[TIMEOUT.dest] = spec.convert(TIMEOUT, text)
        except ValueError:
            raise spec.UsageProblem(f"invalid argument: {shown}") from None
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


def dispatch(args: list[str]) -> int:
    """Parse and run one command line; usage errors exit 1 in agent-coord's words."""
    try:
        global_values, words = split_globals(args)
    except spec.UsageProblem as problem:
        return usage_error(problem, None, args)
    if not words or words[0] in HELP_WORDS:
        return show_help([])
    if words[0] == VERSION.name:
        words = ["version", *words[1:]]
    found = find(words)
    if found is None:
        if words[0] in GROUPS and (len(words) == 1 or words[1] in HELP_WORDS[:2]):
            return show_help(words[:1])
        shown = " ".join(words[:2]) if words[0] in GROUPS else words[0]
        if words[0] in GROUPS:
            subcommands = {c.path[1]: None for c in declarations(words[0]) if len(c.path) > 1}
            hint = spec.did_you_mean(words[1] if len(words) > 1 else "", subcommands,
                                     dashes=f"{words[0]} ")
        else:
            hint = spec.did_you_mean(shown, COMMANDS, dashes="")
        print(f"unknown command: {printable(shown)}{hint} (see 'agentcoordctl --help')", file=sys.stderr)
        return 1
    command, rest = found
    try:
        values, global_after = spec.parse(command, rest, (TIMEOUT,))
    except spec.HelpRequested:
        return show_help(list(command.path))
    except spec.UsageProblem as problem:
        return usage_error(problem, command, args)
    Globals.timeout = global_after.get(TIMEOUT.dest, global_values.get(TIMEOUT.dest, Globals.timeout))
    return _ran(command.run(**values))


def usage_error(problem: spec.UsageProblem, command: spec.Command | None, args: Sequence[str]) -> int:
    where = f"agentcoordctl {command.label}" if command else "agentcoordctl"
    print(f"{printable(problem.message)} (see '{where} -h')", file=sys.stderr)
    return command.usage_exit(args) if command and command.usage_exit else 1


def show_help(path: list[str]) -> int:
    """The help of the app, a group or a command, rendered by typer from the declarations."""
    import typer

    from agentcoordctl import typer_app

    app = typer_app.build(declarations(path[0] if path else None), TIMEOUT, lambda _value: None,
                          (VERSION,))
    try:
        typer.main.get_command(app).main([*path, "--help"], prog_name="agentcoordctl",
                                         standalone_mode=False)
    except typer.Exit as done:
        return done.exit_code
    return 0


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
        return dispatch(args)
    except spec.Exit as done:
        return done.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, exit 2, never a traceback
        if os.environ.get("AGENT_COORD_DEBUG"):
            import traceback  # only here: it costs ~10 ms of every call's start-up

            traceback.print_exc()
        detail = " ".join(str(exc).split())[:300]
        print(f"agentcoordctl: internal error: {type(exc).__name__}: {detail}; coordination state "
              "is UNKNOWN (AGENT_COORD_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2


def run() -> None:
    """The console entry. Output is flushed, then the process ends without the
    interpreter's teardown (freeing every module costs 10-20 ms of a short call);
    nothing of ours needs it (no atexit handlers, children outlive us anyway)."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - let the normal exit report what it can
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    run()
