"""agent-coord's option universe: the options it takes on every command, and the
usage rules it applies to them. A script that passes `--agent-id` to `version`
or `--ttl` to `register-batch` works with agent-coord, so it works here; a
closeout option outside a closeout is refused here in agent-coord's words.

Commands agent-coord has declare `accepts=GLOBAL, checks=CHECKS,
screen=deep_only_for_doctor`; the options they declare themselves take
precedence (and are what their help lists).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentcoordctl.spec import HELP, Command, Opt, Parsed, UsageProblem


def _opts(kind: str, *names: str) -> tuple[Opt, ...]:
    return tuple(Opt(f"--{name}", name.replace("-", "_"), kind, saturate=kind == "int")  # type: ignore[arg-type]
                 for name in names)


GLOBAL: tuple[Opt, ...] = (
    *_opts("text", "backend", "ref", "state-root", "api-url"),
    *_opts("flag", "json"),
    *_opts("text", "agent-id", "repo", "target", "batch-id", "branch", "thread-handle",
           "chat-handle", "host", "pr-url", "dashboard-url", "operator", "phase"),
    Opt("--generation", "generation", "int"),
    *_opts("text", "instance-id"),
    *_opts("int", "ttl"),
    *_opts("text", "status", "terminal", "pr-state", "evidence-url", "workspace"),
    *_opts("flag", "synthetic"),
    *_opts("text", "synthetic-kind", "type", "lane", "message", "reason", "from-route", "to-route",
           "evidence", "severity", "category", "kind", "file", "launch-prompt", "install-dir",
           "status-state-root", "profile"),
    *_opts("flag", "no-profile"),
)
# doctor's own options: elsewhere `--deep` is refused by name (agent-coord looks for it
# before parsing), the others are simply unknown.
DOCTOR_ONLY: tuple[Opt, ...] = (*_opts("flag", "stack-json", "deep"), *_opts("text", "doctor-prefix"))
CLOSEOUT = ("--terminal", "--pr-state", "--evidence-url", "--workspace")


def closeout_usage(parsed: Parsed) -> None:
    """Closeout options belong to `release --terminal` and `record-event --type lane_closed`."""
    supplied = [name for name in CLOSEOUT if name in parsed.given]
    if not supplied:
        return
    command = parsed.command.label
    if command == "release":
        extra = [name for name in supplied if name != "--terminal"]
        if extra and not parsed.given.get("--terminal"):
            raise UsageProblem(f"{extra[0]} requires --terminal")
        return
    if command == "record-event":
        if parsed.given.get("--type") != "lane_closed":
            raise UsageProblem("terminal-only options require --type lane_closed")
        return
    raise UsageProblem(f"{supplied[0]} is only valid with terminal closeout")


def launch_prompt_usage(parsed: Parsed) -> None:
    if "--launch-prompt" in parsed.given and parsed.command.label != "register-batch":
        raise UsageProblem("--launch-prompt is only valid for register-batch")


CHECKS = (closeout_usage, launch_prompt_usage)


def deep_only_for_doctor(command: Command, argv: Sequence[str]) -> None:
    """`--deep` (or a prefix only it has) anywhere on another command, before any other
    parse error — agent-coord's rule, word-prefix matching and all."""
    if command.label == "doctor":
        return
    own = {opt.name: opt for opt in (*command.options(), *command.accepts, HELP)}
    doctor = {opt.name: opt for opt in (*GLOBAL, *DOCTOR_ONLY, HELP)}
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        name, eq, _ = word.partition("=")
        if not name.startswith("--"):
            continue
        matches = [c for c in {**own, **doctor} if c.startswith(name)]
        mine = _exact_or_unique(name, [c for c in matches if c in own])
        if mine is not None and own[mine].takes_value:
            skip = not eq
            continue
        if _exact_or_unique(name, [c for c in matches if c in doctor]) == "--deep":
            raise UsageProblem("--deep is only valid for doctor")


def _exact_or_unique(name: str, matches: list[str]) -> str | None:
    if name in matches:
        return name
    return matches[0] if len(matches) == 1 else None


# spec.Command(..., **AGENT_COORD): a command agent-coord has.
AGENT_COORD = {"accepts": GLOBAL, "checks": CHECKS, "screen": deep_only_for_doctor}
