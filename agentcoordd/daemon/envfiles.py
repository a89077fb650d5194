"""Consumer env files: where a machine's fleet backend is configured once.

The spec names three places (AGENT_COORD_ENV_FILE, $XDG_CONFIG_HOME/agent-coord/env,
$XDG_CONFIG_HOME/agent-coord/http-env.sh). They are shell-ish `KEY=value`
files, sourced by launchd/systemd templates; we parse, never execute them:
blank lines and `#` comments are skipped, a leading `export ` is dropped, one
level of matching single or double quotes is removed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_ENV_FILE = 64 * 1024
_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)")


@dataclass(frozen=True)
class EnvFile:
    path: str
    values: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # exists but could not be read or parsed

    def get(self, name: str) -> str | None:
        value = self.values.get(name, "").strip()
        return value or None


def candidates(env: Mapping[str, str]) -> list[str]:
    """The consumer env file locations, in the spec's order."""
    out: list[str] = []
    explicit = env.get("AGENT_COORD_ENV_FILE", "").strip()
    if explicit:
        out.append(explicit)
    config = env.get("XDG_CONFIG_HOME", "")
    if not (config and os.path.isabs(config)):
        home = env.get("HOME") or os.path.expanduser("~")
        config = os.path.join(home, ".config")
    out.append(os.path.join(config, "agent-coord", "env"))
    out.append(os.path.join(config, "agent-coord", "http-env.sh"))
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    # an unquoted value ends at an inline comment
    return value.split(" #", 1)[0].strip()


def parse(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"line {number} is not KEY=value")
        values[match.group(1)] = _unquote(match.group(2))
    return values


def load(path: str) -> EnvFile | None:
    """None when the file does not exist; an EnvFile with `error` when unusable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_ENV_FILE + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return EnvFile(path, error="is a directory")
    except OSError as exc:
        return EnvFile(path, error=exc.strerror or str(exc))
    if len(raw) > MAX_ENV_FILE:
        return EnvFile(path, error=f"larger than {MAX_ENV_FILE} bytes")
    try:
        return EnvFile(path, parse(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as exc:
        return EnvFile(path, error=str(exc))


def existing(env: Mapping[str, str]) -> list[EnvFile]:
    """Every consumer env file that exists, in order (unusable ones included)."""
    found = []
    for path in candidates(env):
        loaded = load(path)
        if loaded is not None:
            found.append(loaded)
    return found
