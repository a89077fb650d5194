"""Each ctl command declared once, as data: its options, arguments and option
groups. `parse(command, argv)` is the parser every call takes (standard
library only); typer renders help from the same declarations (typer_app.py).

The parser behaves as agent-coord's (Ruby OptionParser), since agents and
their prompts were written against that tool:

* `--opt value` and `--opt=value`; an option's value is the next word,
  whatever it looks like; `--` ends options;
* a long option may be abbreviated to any unambiguous prefix of its words
  (`--ag` = `--agent-id`, `--a-i` too; case and `_`/`-` do not matter) —
  a prefix that also starts a longer option of the same name wins
  (`--sy` = `--synthetic`, not `--synthetic-kind`);
* `-x` is the one long option starting with x (`-j` = `--json`), `-h` is help;
* values convert as they are met, left to right; the last repeated one wins;
* errors read as agent-coord's: `invalid option: --x`, `ambiguous option: --st`,
  `missing argument: --target`, `needless argument: --json=1`,
  `invalid argument: --ttl 1.5`, `unexpected arguments: extra`,
  `missing required --agent-id` (an empty value is missing too);
* `-h`/`--help` anywhere shows the command's help, exit 0.

A command also *accepts* options it ignores (`Command.accepts`): agent-coord
takes its global options on every command, so a script passing one to
`version` must keep working; the command's `checks` then refuse the ones
agent-coord refuses there (closeout options outside a closeout, ...).

A `Group` is declared once and applied to every command that takes it (the
backend selectors, the metadata options, keep-alive, output): its options are
parsed like any other and handed to the command as one value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import msgspec

Kind = Literal["text", "int", "flag", "many", "custom"]
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
WIRE_INT = 2**53  # the protocol's integer bound (agentcoordd.protocol.Int)


class UsageProblem(Exception):
    """The argument list is not one the command takes; the message is agent-coord's."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class HelpRequested(Exception):
    """`-h`/`--help` was met: show the command's help and exit 0."""


class Exit(Exception):
    """End the command with this exit code (what the command's output decided)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


class Opt(msgspec.Struct, frozen=True):
    name: str  # "--agent-id"
    dest: str  # "agent_id"
    kind: Kind = "text"
    default: Any = None  # REQUIRED: the option must be given, and not empty
    metavar: str | None = None
    help: str = ""
    panel: str | None = None  # help section
    parse: Callable[[str], Any] | None = None  # kind "custom": raises ValueError(reason)
    minimum: int | None = None  # kind "int": below is an invalid argument
    maximum: int | None = None
    saturate: bool = False  # kind "int": beyond the wire bound means "as large as can be"

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def takes_value(self) -> bool:
        return self.kind != "flag"


class Arg(msgspec.Struct, frozen=True):
    dest: str
    metavar: str
    help: str = ""
    default: Any = REQUIRED
    rest: bool = False  # every remaining word (run's COMMAND)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class Group(msgspec.Struct, frozen=True):
    """Options handed to the command as one value: `build({dest: value})`."""

    dest: str
    options: tuple[Opt, ...]
    build: Callable[[dict[str, Any]], Any]


Param = Opt | Arg | Group
# A check sees every option given (declared or only accepted), by name, and refuses
# with UsageProblem; a screen sees the raw words before parsing.
Check = Callable[["Parsed"], None]
Screen = Callable[["Command", Sequence[str]], None]


class Command(msgspec.Struct, frozen=True):
    path: tuple[str, ...]  # ("claim",), ("batch", "stop")
    help: str
    params: tuple[Param, ...]
    run: Callable[..., Any]  # called with dest=value keywords
    interspersed: bool = True  # False: options only before the first argument (run -- CMD)
    usage_exit: Callable[[Sequence[str]], int] | None = None  # default 1 (doctor --stack-json: 64)
    epilog: str = ""
    accepts: tuple[Opt, ...] = ()  # taken and ignored (agent-coord's global options)
    checks: tuple[Check, ...] = ()
    screen: Screen | None = None

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

    def universe(self, extra: Sequence[Opt] = ()) -> dict[str, Opt]:
        """Every long option the command takes, by name without dashes: its own first."""
        table: dict[str, Opt] = {}
        for opt in (*self.options(), *extra, *self.accepts, HELP):
            table.setdefault(opt.name[2:], opt)
        return table

    @property
    def label(self) -> str:
        return " ".join(self.path)


HELP = Opt("--help", "help", "flag", help="Show this help.")


class Parsed(msgspec.Struct):
    command: Command
    given: dict[str, Any]  # option name ("--ttl") -> its value, for every option met


# ---- values ----------------------------------------------------------------------------

# Ruby's Integer() as OptionParser accepts it: sign, 0x/0b prefixes, single underscores
# between digits; no spaces, floats or 0o; a leading 0 is octal (docs/compat.md#usage-errors).
_INTEGER = re.compile(
    r"[-+]?(?:0(?:b[01]+(?:_[01]+)*|x[0-9a-f]+(?:_[0-9a-f]+)*)|[0-9]+(?:_[0-9]+)*)",
    re.IGNORECASE | re.ASCII)


def integer(text: str) -> int:
    """An integer in agent-coord's syntax (Ruby's `Integer()`: a leading zero means
    octal, `010` is 8 and `09` is invalid); ValueError otherwise. Huge values are kept
    huge (beyond 40 digits: 10**40, so nothing pays for parsing a megabyte of digits)."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    sign = -1 if text[0] == "-" else 1
    body = text.lstrip("+-").replace("_", "").lower()
    if body[:2] in ("0x", "0b"):
        digits, base = body[2:], 16 if body[1] == "x" else 2
    elif len(body) > 1 and body[0] == "0":
        digits, base = body[1:], 8
        if digits.strip("01234567"):
            raise ValueError(text)
    else:
        digits, base = body, 10
    if len(digits) > 40:
        return sign * 10**40
    return sign * int(digits, base)


def convert(opt: Opt, text: str) -> Any:
    """One option value; ValueError when it is not one."""
    if opt.kind in ("text", "many"):
        return text
    if opt.kind == "int":
        value = integer(text)
        if opt.saturate:
            value = max(-WIRE_INT, min(WIRE_INT, value))
        low = -WIRE_INT if opt.minimum is None else opt.minimum
        high = WIRE_INT if opt.maximum is None else opt.maximum
        if not low <= value <= high:
            raise ValueError(text)
        return value
    assert opt.parse is not None
    return opt.parse(text)


def initial(opt: Opt) -> Any:
    if opt.kind == "flag":
        return False
    return None if opt.required else opt.default


# ---- resolving an option name ----------------------------------------------------------

_AMBIGUOUS, _INVALID = "ambiguous option", "invalid option"


def resolve(table: dict[str, Opt], key: str, *, icase: bool) -> Opt | str:
    """The option `key` (a name without dashes, maybe abbreviated) names, or why none:
    each word of the key starts the option's word (`a-i` → `agent-id`); of several, the
    shortest wins when every other one starts with it."""
    if key in table:
        return table[key]
    pattern = re.compile(r"\A" + re.sub(r"\w+\b", lambda m: m.group(0) + r"\w*", re.escape(key)),
                         re.IGNORECASE if icase else 0)
    found = sorted((name for name in table if pattern.match(name)), key=len)
    if not found:
        return _INVALID
    best = found[0]
    for other in found[1:]:
        if table[other] is not table[best] and not other.startswith(best):
            return _AMBIGUOUS
    return table[best]


def did_you_mean(word: str, names: Iterable[str], dashes: str = "--") -> str:
    """`; did you mean --agent-id?` for the nearest name (difflib), else nothing: one line,
    after agent-coord's own words (it prints its suggestion on a second line)."""
    import difflib

    close = difflib.get_close_matches(word.lower().replace("_", "-"), list(names), n=1, cutoff=0.6)
    return f"; did you mean {dashes}{close[0]}?" if close else ""


# ---- parsing ---------------------------------------------------------------------------


def parse(command: Command, argv: Sequence[str],
          extra: Sequence[Opt] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the command's keyword arguments, values of the `extra` options) from `argv`,
    the words after the command's name. Raises UsageProblem or HelpRequested."""
    if command.screen is not None:
        command.screen(command, argv)
    table = command.universe(extra)
    declared = {id(opt) for opt in command.options()}
    raw: dict[str, Any] = {opt.dest: initial(opt) for opt in command.options()}
    given: dict[str, Any] = {}
    words: list[str] = []
    pending = list(argv)
    pending.reverse()  # a stack: short-option clusters push their rest back

    def take(opt: Opt, shown: str, value: str | None, joined: bool) -> None:
        if not opt.takes_value:
            if value is not None:
                raise UsageProblem(f"needless argument: {shown}")
            if opt is HELP:
                raise HelpRequested()
            converted: Any = True
        else:
            if value is None:
                if not pending:
                    raise UsageProblem(f"missing argument: {shown}")
                value = pending.pop()
                joined = False
            try:
                converted = convert(opt, value)
            except ValueError:
                raise UsageProblem(f"invalid argument: {shown if joined else shown + ' ' + value}") from None
        if opt.kind == "many":
            given.setdefault(opt.name, []).append(converted)
        else:
            given[opt.name] = converted
        if id(opt) in declared:
            raw[opt.dest] = given[opt.name]

    options_done = False
    while pending:
        word = pending.pop()
        if options_done or word == "-" or not word.startswith("-"):
            words.append(word)
            if not command.interspersed:
                options_done = True
            continue
        if word == "--":
            options_done = True
            continue
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            found = resolve(table, key.replace("_", "-"), icase=True)
            if isinstance(found, str):
                hint = did_you_mean(key, table) if found == _INVALID else ""
                raise UsageProblem(f"{found}: {word}{hint}")
            take(found, word, value if eq else None, bool(eq))
            continue
        letter, rest = word[1], word[2:]
        if letter == "h":
            raise HelpRequested()
        found = resolve(table, letter, icase=False)
        if isinstance(found, str):
            raise UsageProblem(f"{found}: {word}")
        if rest.startswith("="):
            take(found, word, rest[1:] if found.takes_value else rest, True)
        elif found.takes_value:
            take(found, word, rest or None, bool(rest))
        else:
            take(found, word[:2], None, False)
            if rest:
                pending.append("-" + rest)  # -jx: -j, then -x
    for arg in command.arguments():
        if arg.rest:
            raw[arg.dest], words = words, []
        elif words:
            raw[arg.dest] = words.pop(0)
        else:
            raw[arg.dest] = None if arg.required else arg.default
    if words:
        raise UsageProblem(f"unexpected arguments: {' '.join(words)}")
    for check in command.checks:
        check(Parsed(command, given))
    for opt in command.options():
        if opt.required and given.get(opt.name) in (None, ""):
            raise UsageProblem(f"missing required {opt.name}")
    for arg in command.arguments():
        if arg.required and raw[arg.dest] in (None, []):
            raise UsageProblem(f"missing argument: {arg.metavar}")
    extras = {opt.dest: given[opt.name] for opt in extra
              if opt.name in given and table[opt.name[2:]] is opt}
    return finish(command, raw), extras


def finish(command: Command, raw: dict[str, Any]) -> dict[str, Any]:
    """Parsed values as the command takes them: each group built into its one value."""
    out: dict[str, Any] = {}
    for param in command.params:
        if isinstance(param, Group):
            out[param.dest] = param.build({opt.dest: raw[opt.dest] for opt in param.options})
        else:
            out[param.dest] = raw[param.dest]
    return out
