"""Each ctl command declared once, as data: its options, arguments and option
groups. Two things are built from a declaration and can never disagree:

* `parse(command, argv)`: the fast path every agent call takes (standard
  library only, no typer), with click's rules: `--opt value` and
  `--opt=value`, flags take no value, the last of a repeated option wins
  (repeatable ones collect), `--` ends options, an option's value is the
  next word whatever it looks like;
* the typer app (agentcoordctl/typer_app.py), imported only to render help
  and usage errors. When the fast parser refuses an argument list, cli.py
  hands it to typer, so every usage error reads exactly as typer prints it;
  a property test checks that both accept and refuse the same lists alike.

A `Group` is declared once and applied to every command that takes it (the
backend selectors, the metadata options, keep-alive, output): its options are
parsed like any other and handed to the command as one value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["text", "int", "flag", "many", "custom"]
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()


class UsageProblem(Exception):
    """The fast parser cannot take this argument list: typer renders the error."""


class Exit(Exception):
    """End the command with this exit code (what the command's output decided)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Opt:
    name: str  # "--agent-id"
    dest: str  # "agent_id"
    kind: Kind = "text"
    default: Any = None  # REQUIRED: the option must be given
    metavar: str | None = None
    help: str = ""
    panel: str | None = None  # help section
    parse: Callable[[str], Any] | None = None  # kind "custom": raises ValueError(reason)
    minimum: int | None = None  # kind "int"
    maximum: int | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Arg:
    dest: str
    metavar: str
    help: str = ""
    default: Any = REQUIRED
    rest: bool = False  # every remaining word (run's COMMAND)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Group:
    """Options handed to the command as one value: `build({dest: value})`."""

    dest: str
    options: tuple[Opt, ...]
    build: Callable[[dict[str, Any]], Any]


Param = Opt | Arg | Group


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]  # ("claim",), ("batch", "stop")
    help: str
    params: tuple[Param, ...]
    run: Callable[..., Any]  # called with dest=value keywords
    interspersed: bool = True  # False: options only before the first argument (run -- CMD)
    usage_exit: Callable[[Sequence[str]], int] | None = None  # default 1 (doctor --stack-json: 64)
    epilog: str = ""

    def options(self) -> list[Opt]:
        out: list[Opt] = []
        for param in self.params:
            if isinstance(param, Opt):
                out.append(param)
            elif isinstance(param, Group):
                out.extend(param.options)
        return out

    def arguments(self) -> list[Arg]:
        return [param for param in self.params if isinstance(param, Arg)]


def initial(opt: Opt) -> Any:
    if opt.kind == "flag":
        return False
    return None if opt.required else opt.default


def convert(opt: Opt, text: str) -> Any:
    """One option value, or UsageProblem (typer words the message)."""
    if opt.kind in ("text", "many"):
        return text
    if opt.kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise UsageProblem(opt.name) from None
        if (opt.minimum is not None and value < opt.minimum) or (
                opt.maximum is not None and value > opt.maximum):
            raise UsageProblem(opt.name)
        return value
    assert opt.parse is not None
    try:
        return opt.parse(text)
    except ValueError:
        raise UsageProblem(opt.name) from None


def parse(command: Command, argv: Sequence[str]) -> dict[str, Any]:
    """The command's keyword arguments from `argv` (the words after its name)."""
    by_name = {opt.name: opt for opt in command.options()}
    by_dest = {opt.dest: opt for opt in by_name.values()}
    raw: dict[str, Any] = {opt.dest: initial(opt) for opt in by_name.values()}
    texts: dict[str, list[str]] = {}
    words: list[str] = []
    options_done = False
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if options_done or word == "-" or not word.startswith("-"):
            words.append(word)
            if not command.interspersed:
                options_done = True
            continue
        if word == "--":
            options_done = True
            continue
        if word in ("-h", "--help") or not word.startswith("--"):
            raise UsageProblem(word)  # help, or a short option we do not have
        name, eq, text = word.partition("=")
        opt = by_name.get(name)
        if opt is None:
            raise UsageProblem(name)
        if opt.kind == "flag":
            if eq:
                raise UsageProblem(name)
            raw[opt.dest] = True
            continue
        if not eq:
            if i >= len(argv):
                raise UsageProblem(name)  # requires a value
            text = argv[i]
            i += 1
        texts.setdefault(opt.dest, []).append(text)
    for dest, seen in texts.items():  # like click: converted at the end, the last one wins
        opt = by_dest[dest]
        raw[dest] = [convert(opt, t) for t in seen] if opt.kind == "many" else convert(opt, seen[-1])
    for opt in by_name.values():
        if opt.required and opt.dest not in texts:
            raise UsageProblem(opt.name)
    for arg in command.arguments():
        if arg.rest:
            raw[arg.dest] = words
            words = []
        elif words:
            raw[arg.dest] = words.pop(0)
        elif arg.required:
            raise UsageProblem(arg.metavar)
        else:
            raw[arg.dest] = arg.default
    if words:
        raise UsageProblem(words[0])  # an unexpected extra argument
    return finish(command, raw)


def finish(command: Command, raw: dict[str, Any]) -> dict[str, Any]:
    """Parsed values as the command takes them: each group built into its one value."""
    out: dict[str, Any] = {}
    for param in command.params:
        if isinstance(param, Group):
            out[param.dest] = param.build({opt.dest: raw[opt.dest] for opt in param.options})
        else:
            out[param.dest] = raw[param.dest]
    return out
