"""`agentcoordctl service install|uninstall|status`: the daemon as a user service.

Templates are the files of the top-level service/ folder (systemd user units with
socket activation; a launchd KeepAlive agent), installed as the data package
`agentcoord_service` (pyproject.toml maps it to service/). Rendering substitutes the installed
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
    """The unit templates: service/ in a checkout, package data `agentcoord_service` when
    installed (one copy, mapped in pyproject.toml)."""
    from importlib.resources import files

    return files("agentcoord_service")


def default_kind() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def _config_home(home: Path) -> Path:
    """$XDG_CONFIG_HOME when set to an absolute path, else ~/.config (the XDG rule)."""
    config = os.environ.get("XDG_CONFIG_HOME")
    return Path(config) if config and os.path.isabs(config) else home / ".config"


def default_env_file(home: Path) -> Path:
    return _config_home(home) / "agent-coord" / "env"


def systemd_unit_dir(home: Path) -> Path:
    """Where systemd --user looks for a user's own units."""
    return _config_home(home) / "systemd" / "user"


def launchd_plist(home: Path) -> Path:
    return home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


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
        unit_dir = systemd_unit_dir(home)
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
        plist = launchd_plist(home)
        text = (templates / "launchd" / f"{LAUNCHD_LABEL}.plist").read_text()
        files = {plist: render(text, python=python, env_file=env_file, log=log)}
        return Plan(files, [["launchctl", "bootstrap", f"gui/{os.getuid()}", str(plist)]])
    raise ValueError(f"unknown service manager: {kind}")


def plan_uninstall(kind: str, *, home: Path) -> Plan:
    if kind == "systemd":
        unit_dir = systemd_unit_dir(home)
        return Plan(
            {unit_dir / name: "" for name in SYSTEMD_UNITS},
            [
                ["systemctl", "--user", "disable", "--now", "agentcoordd.socket", "agentcoordd.service"],
                ["systemctl", "--user", "daemon-reload"],
            ],
        )
    if kind == "launchd":
        plist = launchd_plist(home)
        return Plan({plist: ""}, [["launchctl", "bootout", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]])
    raise ValueError(f"unknown service manager: {kind}")


def status_command(kind: str) -> list[str]:
    if kind == "systemd":
        return ["systemctl", "--user", "status", "--no-pager", "agentcoordd.socket", "agentcoordd.service"]
    return ["launchctl", "print", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]


@dataclass(frozen=True)
class Ran:
    code: int
    output: str  # stdout + stderr, stripped


Runner = Callable[[Sequence[str]], Ran]


def _run(argv: Sequence[str]) -> Ran:
    """Run a service-manager command, its output captured (shown only when it fails)."""
    try:
        done = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return Ran(127, f"{argv[0]} not found on PATH")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Ran(126, str(exc))
    return Ran(done.returncode, (done.stdout + done.stderr).strip())


# `systemctl --user is-system-running` answers one of these when a user manager serves.
_MANAGER_STATES = ("running", "degraded", "starting", "initializing", "maintenance", "stopping")
NO_USER_MANAGER = ("no systemd user manager for this user ({why}): log in through a session "
                   "that starts one (or `sudo loginctl enable-linger $USER`, then log in again) "
                   "and retry; without a service, agentcoordctl starts agentcoordd on demand")


def user_manager_problem(run: Runner = _run) -> str | None:
    """Why `systemctl --user` cannot work here (None when a user manager answers)."""
    answer = run(["systemctl", "--user", "is-system-running"])
    if answer.code == 127:
        return NO_USER_MANAGER.format(why="systemctl not found on PATH")
    state = answer.output.splitlines()[0].strip() if answer.output else ""
    if state in _MANAGER_STATES:
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    bus = f"no {runtime}/bus" if runtime and not os.path.exists(f"{runtime}/bus") else \
        ("XDG_RUNTIME_DIR is not set" if not runtime else f"systemctl --user: {state or 'no answer'}")
    return NO_USER_MANAGER.format(why=bus)


def _failed(command: Sequence[str], ran: Ran) -> str:
    first = ran.output.splitlines()[0] if ran.output else "no output"
    return f"error: `{' '.join(command)}` exited {ran.code}: {first}"


def apply(plan: Plan, *, remove: bool, dry_run: bool, say: Callable[[str], None],
          err: Callable[[str], None], run: Runner = _run) -> int:
    """Write (or remove) the files, then run the commands; print each step.

    Install: a failing step removes what this install wrote (restoring files it
    replaced) and exits 2. Uninstall: every step runs; any failure exits 2."""
    if remove:
        code = 0
        for command in plan.commands:
            say("run " + " ".join(command))
            if not dry_run:
                ran = run(command)
                if ran.code != 0:
                    err(_failed(command, ran))
                    code = 2
        for path in plan.files:
            say(f"remove {path}")
            if not dry_run:
                path.unlink(missing_ok=True)
        return code
    before: dict[Path, str | None] = {}
    for path, text in plan.files.items():
        say(f"write {path}")
        if dry_run:
            for line in text.splitlines():
                say("    " + line)
            continue
        before[path] = path.read_text() if path.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for command in plan.commands:
        say("run " + " ".join(command))
        if not dry_run:
            ran = run(command)
            if ran.code != 0:
                err(_failed(command, ran))
                _undo(before, say)
                return 2
    return 0


def _undo(before: dict[Path, str | None], say: Callable[[str], None]) -> None:
    for path, text in before.items():
        if text is None:
            say(f"remove {path} (install failed)")
            path.unlink(missing_ok=True)
        else:
            say(f"restore {path} (install failed)")
            path.write_text(text)


def status_report(kind: str, home: Path, run: Runner = _run) -> tuple[dict[str, Any], int]:
    """`service status --json`: (the report, exit code: 0 installed and running, else 2)."""
    if kind == "systemd":
        problem = user_manager_problem(run)
        units = []
        for name in SYSTEMD_UNITS:
            path = systemd_unit_dir(home) / name
            row: dict[str, Any] = {"unit": name, "path": str(path), "installed": path.is_file()}
            if problem is None:
                row["active"] = run(["systemctl", "--user", "is-active", name]).output or "unknown"
                row["enabled"] = run(["systemctl", "--user", "is-enabled", name]).output or "unknown"
            units.append(row)
        running = problem is None and all(u["installed"] for u in units) and units[0].get("active") == "active"
        report = {"kind": kind, "user_manager": problem is None, "running": running, "units": units}
        if problem is not None:
            report["error"] = problem
        return report, 0 if running else 2
    plist = launchd_plist(home)
    loaded = run(status_command(kind)).code == 0
    report = {"kind": kind, "running": loaded, "units": [
        {"unit": LAUNCHD_LABEL, "path": str(plist), "installed": plist.is_file(), "loaded": loaded}]}
    return report, 0 if loaded and plist.is_file() else 2


# ---- the commands ------------------------------------------------------------------


def service(*, action: str, env_file: str | None, dry_run: bool, kind: str | None, json: bool) -> None:
    kind = kind or default_kind()
    if kind not in ("systemd", "launchd"):
        _usage(f"--kind must be systemd or launchd: {kind}")
    if json and action != "status":
        _usage("--json only applies to service status")
    home = Path(os.path.expanduser("~"))

    def say(line: str) -> None:
        print(line, flush=True)

    def err(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if action == "status":
        if json:
            import json as json_module

            report, code = status_report(kind, home)
            say(json_module.dumps(report, indent=2))
            raise Exit(code)
        command = status_command(kind)
        say("run " + " ".join(command))
        if dry_run:
            raise Exit(0)
        if kind == "systemd" and (problem := user_manager_problem()) is not None:
            err(f"error: {problem}")
            raise Exit(2)
        try:
            code = subprocess.run(command, check=False).returncode  # its own display, as is
        except FileNotFoundError:
            err(f"error: {command[0]} not found on PATH")
            code = 127
        raise Exit(code and 2)
    if action not in ("install", "uninstall"):
        _usage(f"unknown service action: {action} (expected install, uninstall or status)")
    problem = user_manager_problem() if kind == "systemd" else None
    if action == "install":
        env_path = (Path(env_file) if env_file else default_env_file(home)).expanduser().absolute()
        _check_env_file(env_path, say)
        plan = plan_install(kind, home=home, env_file=env_path)
        if problem is not None:
            if not dry_run:
                err(f"error: {problem}")
                raise Exit(2)
            say(f"note: {problem}")
        raise Exit(apply(plan, remove=False, dry_run=dry_run, say=say, err=err))
    plan = plan_uninstall(kind, home=home)
    if not any(path.exists() for path in plan.files):
        say(f"not installed: no {' or '.join(str(p) for p in plan.files)}")
        raise Exit(0)
    if problem is not None:  # nothing can be running them: remove the files, say what was not done
        if dry_run:
            say(f"note: {problem}")
        for path in plan.files:
            say(f"remove {path}")
            if not dry_run:
                path.unlink(missing_ok=True)
        if dry_run:
            raise Exit(0)
        err(f"error: unit files removed but not disabled: {problem}")
        raise Exit(2)
    raise Exit(apply(plan, remove=True, dry_run=dry_run, say=say, err=err))


def _check_env_file(path: Path, say: Callable[[str], None]) -> None:
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        say(f"note: env file {path} does not exist yet; create it 0600 with AGENT_COORD_API_URL, "
            "AGENT_COORD_API_TOKEN and AGENT_COORD_MACHINE_ID (agentcoordctl docs service)")
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
         help="Private (0600) env file the service reads (default "
              "$XDG_CONFIG_HOME/agent-coord/env, else ~/.config/agent-coord/env)."),
     Opt("--dry-run", "dry_run", "flag", help="Print what would be done; change nothing."),
     Opt("--kind", "kind", metavar="systemd|launchd",
         help="Service manager (default: this platform's)."),
     Opt("--json", "json", "flag", help="status: a JSON report (units installed, active, enabled).")),
    service),)
