"""The typer app built from the command declarations (agentcoordctl/spec.py):
help, completion and usage errors. Only imported when one of those is needed;
an agent's ordinary call never loads typer.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Annotated, Any, Optional

import typer

from agentcoordctl import spec

APP_HELP = "agentcoordctl: coordinate AI coding agents through the per-machine agentcoordd."
GROUP_HELP = {
    "batch": "Batch control signals (stop requests).",
    "usage": "Usage reports: tokens and cost per model.",
    "token": "Provision, rotate or revoke a machine's credentials (runs here; no daemon).",
    "capacity": "Capacity profiles, inboxes and lane occupancy for reservations (agentcoordctl docs capacity).",
    "reservation": "Consume, release or show a capacity reservation (agentcoordctl docs capacity).",
    "limit": "Report, clear or list usage limits of quota pools (agentcoordctl docs capacity).",
}


def _option(opt: spec.Opt) -> tuple[Any, Any]:
    """(annotation, default) of one option as typer declares it."""
    info: dict[str, Any] = {"help": opt.help}
    if opt.metavar:
        info["metavar"] = opt.metavar
    elif opt.kind != "flag":  # never click's `<str>`: a word a reader recognizes
        info["metavar"] = "N" if opt.kind == "int" else "TEXT"
    if opt.panel:
        info["rich_help_panel"] = opt.panel
    if opt.kind == "flag":
        return Annotated[bool, typer.Option(opt.name, **info)], False
    if opt.kind == "int":
        kind: Any = int
        if opt.minimum is not None:
            info["min"] = opt.minimum
        if opt.maximum is not None:
            info["max"] = opt.maximum
    elif opt.kind == "many":
        kind = list[str]
    elif opt.kind == "custom":
        kind, info["parser"] = Any, opt.parse
    else:
        kind = str
    if opt.required:
        return Annotated[kind, typer.Option(opt.name, **info)], inspect.Parameter.empty
    return Annotated[Optional[kind], typer.Option(opt.name, **info)], opt.default


def _argument(arg: spec.Arg) -> tuple[Any, Any]:
    info = {"metavar": arg.metavar, "help": arg.help}
    if arg.rest:
        return Annotated[list[str], typer.Argument(**info)], inspect.Parameter.empty
    if arg.required:
        return Annotated[str, typer.Argument(**info)], inspect.Parameter.empty
    return Annotated[Optional[str], typer.Argument(**info)], arg.default


def callback(command: spec.Command) -> Any:
    """A function whose signature is the command's declaration (what typer reads)."""
    params: list[inspect.Parameter] = []
    for param in command.params:
        members: Iterable[Any] = param.options if isinstance(param, spec.Group) else (param,)
        for member in members:
            annotation, default = (_argument(member) if isinstance(member, spec.Arg)
                                   else _option(member))
            params.append(inspect.Parameter(member.dest, inspect.Parameter.KEYWORD_ONLY,
                                            default=default, annotation=annotation))

    def run(**raw: Any) -> Any:
        return command.run(**spec.finish(command, raw))

    run.__name__ = command.path[-1].replace("-", "_")
    run.__doc__ = command.help
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def short_help(text: str) -> str:
    """The command list shows a command's whole first sentence (click would cut it at
    45 characters, mid-word)."""
    first = text.strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def build(commands: Iterable[spec.Command], timeout_option: spec.Opt,
          on_timeout: Any, app_options: Iterable[spec.Opt] = ()) -> typer.Typer:
    app = typer.Typer(name="agentcoordctl", add_completion=False, no_args_is_help=True,
                      pretty_exceptions_enable=False, rich_markup_mode=None,
                      context_settings={"help_option_names": ["-h", "--help"],
                                        "max_content_width": 100})
    options = (timeout_option, *app_options)
    declared = [(opt, *_option(opt)) for opt in options]

    def main_callback(**values: Any) -> None:
        on_timeout(values[timeout_option.dest])

    main_callback.__doc__ = APP_HELP
    main_callback.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(opt.dest, inspect.Parameter.KEYWORD_ONLY, default=default,
                           annotation=annotation) for opt, annotation, default in declared])
    main_callback.__annotations__ = {opt.dest: annotation for opt, annotation, _ in declared}
    app.callback()(main_callback)
    groups: dict[str, typer.Typer] = {}
    for command in commands:
        settings = {} if command.interspersed else {"allow_interspersed_args": False}
        if len(command.path) == 1:
            app.command(command.path[0], context_settings=settings, epilog=command.epilog or None,
                        short_help=short_help(command.help))(callback(command))
            continue
        group = groups.get(command.path[0])
        if group is None:
            group = groups[command.path[0]] = typer.Typer(
                name=command.path[0], no_args_is_help=True, rich_markup_mode=None,
                add_completion=False, help=GROUP_HELP.get(command.path[0], ""),
                short_help=short_help(GROUP_HELP.get(command.path[0], "")))
            app.add_typer(group, name=command.path[0])
        group.command(command.path[1], context_settings=settings,
                      short_help=short_help(command.help))(callback(command))
    return app
