"""`agentcoordctl bootstrap`: put agentcoordctl and `agent-coord` on PATH.

`agent-coord` is the same program under the existing tool's name, so workflow
docs that call `agent-coord …` keep working. Idempotent: links that already
point at this installation and a profile line already present are left alone.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import spec
from agentcoordctl.spec import Exit, Opt

PROGRAMS = ("agentcoordctl", "agent-coord")
PROFILE_MARKER = "# added by agentcoordctl bootstrap"


def installed_program() -> Path:
    """The agentcoordctl console script of this installation."""
    beside = Path(sys.executable).parent / "agentcoordctl"
    if beside.exists():
        return beside
    found = shutil.which("agentcoordctl")
    if found:
        return Path(found)
    raise FileNotFoundError("agentcoordctl console script not found; install the package first")


def default_profile(home: Path, shell: str | None) -> Path:
    name = os.path.basename(shell or "")
    if name == "zsh":
        return home / ".zshrc"
    if name == "bash":
        return home / ".bashrc"
    return home / ".profile"


def bootstrap(
    *,
    home: Path,
    install_dir: Path | None,
    profile: Path | None,
    no_profile: bool,
    program: Path,
    shell: str | None,
    say: Callable[[str], None],
) -> int:
    target_dir = (install_dir or home / ".local" / "bin").expanduser()
    target_dir.mkdir(parents=True, exist_ok=True)
    for name in PROGRAMS:
        link = target_dir / name
        if link.is_symlink() and os.readlink(link) == str(program):
            say(f"unchanged {link} -> {program}")
            continue
        if link.exists() and not link.is_symlink():
            say(f"error: {link} exists and is not a link; move it away and rerun")
            return 2
        if link.is_symlink():
            link.unlink()
        link.symlink_to(program)
        say(f"linked {link} -> {program}")
    if no_profile:
        say("profile unchanged (--no-profile)")
        return 0
    profile_path = (profile or default_profile(home, shell)).expanduser()
    line = f'export PATH="{target_dir}:$PATH"'
    existing = profile_path.read_text() if profile_path.exists() else ""
    if line in existing:
        say(f"unchanged {profile_path} (PATH line present)")
    else:
        with profile_path.open("a") as fh:
            fh.write(("\n" if existing and not existing.endswith("\n") else "") + f"{PROFILE_MARKER}\n{line}\n")
        say(f"appended PATH line to {profile_path}; open a new shell or run: {line}")
    return 0


# ---- the command -------------------------------------------------------------------


def bootstrap_command(*, install_dir: str | None, profile: str | None, no_profile: bool) -> None:
    try:
        program = installed_program()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(2) from None
    code = bootstrap(home=Path(os.path.expanduser("~")),
                     install_dir=Path(install_dir) if install_dir else None,
                     profile=Path(profile) if profile else None,
                     no_profile=no_profile, program=program, shell=os.environ.get("SHELL"),
                     say=lambda line: print(line, flush=True))
    raise Exit(code)


COMMANDS = (spec.Command(
    ("bootstrap",), "Put agentcoordctl and the `agent-coord` compatibility command on PATH "
    "(idempotent).",
    (Opt("--install-dir", "install_dir", metavar="PATH",
         help="Where the commands go (default ~/.local/bin)."),
     Opt("--profile", "profile", metavar="PATH", help="Shell profile to extend (default: by $SHELL)."),
     Opt("--no-profile", "no_profile", "flag", help="Do not touch any shell profile.")),
    bootstrap_command, **AGENT_COORD),)
