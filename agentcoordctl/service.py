"""`agentcoordctl service install|uninstall|status`: the daemon as a user service.

Templates are the files under service/ (systemd user units with socket
activation; a launchd KeepAlive agent). Rendering substitutes the installed
interpreter and paths; enabling runs `systemctl --user` or `launchctl`. Every
action is printed; --dry-run prints and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcoordctl import spec
from agentcoordctl.spec import Arg, Exit, Opt

LAUNCHD_LABEL = "dev.agentcoord.agentcoordd"
SYSTEMD_UNITS = ("agentcoordd.socket", "agentcoordd.service")


def template_dir() -> Any:
    """The unit templates, shipped as package data (agentcoordctl/templates/)."""
    from importlib.resources import files

    return files("agentcoordctl") / "templates"


def default_kind() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def default_env_file(home: Path) -> Path:
    config = os.environ.get("XDG_CONFIG_HOME")
    base = Path(config) if config and os.path.isabs(config) else home / ".config"
    return base / "agent-coord" / "env"


@dataclass(frozen=True)
class Plan:
    files: dict[Path, str]  # destination -> rendered text
    commands: list[list[str]]


def render(text: str, *, python: str, env_file: Path, log: Path) -> str:
    return (
        text.replace("@PYTHON@", python)
        .replace("@ENV_FILE@", str(env_file))
        .replace("@LOG@", str(log))
    )


def plan_install(kind: str, *, home: Path, env_file: Path, python: str = sys.executable) -> Plan:
    templates = template_dir()
    log = home / ".local" / "state" / "agentcoord" / "agentcoordd.log"
    if kind == "systemd":
        unit_dir = home / ".config" / "systemd" / "user"
        files = {
            unit_dir / name: render((templates / "systemd" / name).read_text(), python=python, env_file=env_file, log=log)
            for name in SYSTEMD_UNITS
        }
        commands = [
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", "agentcoordd.socket"],
        ]
        return Plan(files, commands)
    if kind == "launchd":
        plist = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        text = (templates / "launchd" / f"{LAUNCHD_LABEL}.plist").read_text()
        files = {plist: render(text, python=python, env_file=env_file, log=log)}
        return Plan(files, [["launchctl", "bootstrap", f"gui/{os.getuid()}", str(plist)]])
    raise ValueError(f"unknown service manager: {kind}")


def plan_uninstall(kind: str, *, home: Path) -> Plan:
    if kind == "systemd":
        unit_dir = home / ".config" / "systemd" / "user"
        return Plan(
            {unit_dir / name: "" for name in SYSTEMD_UNITS},
            [
                ["systemctl", "--user", "disable", "--now", "agentcoordd.socket", "agentcoordd.service"],
                ["systemctl", "--user", "daemon-reload"],
            ],
        )
    if kind == "launchd":
        plist = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        return Plan({plist: ""}, [["launchctl", "bootout", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]])
    raise ValueError(f"unknown service manager: {kind}")


def status_command(kind: str) -> list[str]:
    if kind == "systemd":
        return ["systemctl", "--user", "status", "--no-pager", "agentcoordd.socket", "agentcoordd.service"]
    return ["launchctl", "print", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]


Runner = Callable[[Sequence[str]], int]


def _run(argv: Sequence[str]) -> int:
    try:
        return subprocess.run(list(argv), check=False).returncode
    except FileNotFoundError:
        print(f"error: {argv[0]} not found on PATH", file=sys.stderr)
        return 127


def apply(plan: Plan, *, remove: bool, dry_run: bool, say: Callable[[str], None], run: Runner = _run) -> int:
    """Write (or remove) the files, then run the commands; print each step."""
    if remove:
        for command in plan.commands:
            say("run " + " ".join(command))
            if not dry_run:
                run(command)  # a unit that is not loaded is fine to "disable"
        for path in plan.files:
            say(f"remove {path}")
            if not dry_run:
                path.unlink(missing_ok=True)
        return 0
    for path, text in plan.files.items():
        say(f"write {path}")
        if dry_run:
            for line in text.splitlines():
                say("    " + line)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for command in plan.commands:
        say("run " + " ".join(command))
        if not dry_run:
            code = run(command)
            if code != 0:
                say(f"error: `{' '.join(command)}` exited {code}")
                return 2
    return 0


# ---- the commands ------------------------------------------------------------------


def service(*, action: str, env_file: str | None, dry_run: bool, kind: str | None) -> None:
    kind = kind or default_kind()
    if kind not in ("systemd", "launchd"):
        _usage(f"--kind must be systemd or launchd: {kind}")
    home = Path(os.path.expanduser("~"))

    def say(line: str) -> None:
        print(line, flush=True)

    if action == "status":
        command = status_command(kind)
        say("run " + " ".join(command))
        raise Exit(0 if dry_run else (_run(command) and 2))
    if action == "install":
        env_path = (Path(env_file) if env_file else default_env_file(home)).expanduser().absolute()
        _check_env_file(env_path, say)
        plan = plan_install(kind, home=home, env_file=env_path)
        raise Exit(apply(plan, remove=False, dry_run=dry_run, say=say))
    if action == "uninstall":
        raise Exit(apply(plan_uninstall(kind, home=home), remove=True, dry_run=dry_run, say=say))
    _usage(f"unknown service action: {action} (expected install, uninstall or status)")


def _check_env_file(path: Path, say: Callable[[str], None]) -> None:
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        say(f"note: env file {path} does not exist yet; create it 0600 with AGENT_COORD_API_URL, "
            "AGENT_COORD_API_TOKEN and AGENT_COORD_MACHINE_ID (see docs/service.md)")
        return
    except OSError:
        return
    if mode & 0o077:
        say(f"warning: env file {path} is readable by others (mode {mode:o}); chmod 600 {path}")


def _usage(message: str) -> None:
    print(message, file=sys.stderr)
    raise Exit(1)


COMMANDS = (spec.Command(
    ("service",), "Install agentcoordd as a user service (systemd socket activation / launchd "
    "KeepAlive).",
    (Arg("action", "install|uninstall|status", "install, uninstall or status."),
     Opt("--env-file", "env_file", metavar="PATH",
         help="Private (0600) env file the service reads (default ~/.config/agent-coord/env)."),
     Opt("--dry-run", "dry_run", "flag", help="Print what would be done; change nothing."),
     Opt("--kind", "kind", metavar="systemd|launchd",
         help="Service manager (default: this platform's).")),
    service),)
