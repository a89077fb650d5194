"""The daemon's own config file: `agentcoordd.toml` (docs/notifications.md, docs/keepalive.md).

Where: `agentcoordd --config PATH`, else `$AGENT_COORD_DAEMON_CONFIG`, else
`$XDG_CONFIG_HOME/agentcoord/agentcoordd.toml` (`$HOME/.config` standing in
for an unset or relative XDG_CONFIG_HOME). Read with the stdlib `tomllib`.
A file that does not exist configures nothing; one that was named explicitly
(flag or variable) and does not exist, cannot be read or is not TOML is an
error: one line, and the daemon runs with the file ignored.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_ENV = "AGENT_COORD_DAEMON_CONFIG"
MAX_CONFIG = 64 * 1024


@dataclass(frozen=True)
class ConfigFile:
    path: str | None  # None: no location at all (no HOME)
    table: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    exists: bool = False


def config_path(env: Mapping[str, str], flag: str | None = None) -> tuple[str | None, bool]:
    """(path, named explicitly)."""
    if flag:
        return flag, True
    if env.get(CONFIG_ENV):
        return env[CONFIG_ENV], True
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME", "")
        base = os.path.join(home, ".config") if home else ""
    return (os.path.join(base, "agentcoord", "agentcoordd.toml") if base else None), False


def load(env: Mapping[str, str], flag: str | None = None) -> ConfigFile:
    path, explicit = config_path(env, flag)
    if path is None:
        return ConfigFile(None)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG + 1)
    except FileNotFoundError:
        return ConfigFile(path, error="does not exist" if explicit else None)
    except OSError as exc:
        return ConfigFile(path, error=exc.strerror or str(exc), exists=True)
    if len(raw) > MAX_CONFIG:
        return ConfigFile(path, error=f"larger than {MAX_CONFIG} bytes", exists=True)
    try:
        table = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return ConfigFile(path, error="not UTF-8 text", exists=True)
    except tomllib.TOMLDecodeError as exc:
        return ConfigFile(path, error=f"not valid TOML: {exc}", exists=True)
    return ConfigFile(path, table, exists=True)


@dataclass(frozen=True)
class Layered:
    """A section's settings as the daemon finds them: setting -> (value, where it came
    from), and one line per problem with a file."""

    raw: dict[str, tuple[Any, str]]
    errors: list[str]
    config_path: str | None


def layered(env: Mapping[str, str], config_flag: str | None, section: str,
            env_names: Mapping[str, str], toml_names: Mapping[str, str]) -> Layered:
    """Per setting, the first that gives it: the daemon's environment, a consumer env
    file (envfiles.py, in its order), `[section]` of agentcoordd.toml."""
    from agentcoordd.daemon import envfiles

    files = [f for f in envfiles.existing(env) if f.error is None]
    toml = load(env, config_flag)
    errors: list[str] = []
    if toml.error:
        errors.append(f"config file {toml.path}: {toml.error} (ignored)")
    table = toml.table.get(section, {})
    if not isinstance(table, dict):
        errors.append(f"config file {toml.path}: [{section}] is not a table (ignored)")
        table = {}
    unknown = sorted(set(table) - set(toml_names.values()))
    if unknown:
        errors.append(f"config file {toml.path}: unknown setting {section}.{unknown[0]} (ignored)")
    raw: dict[str, tuple[Any, str]] = {}
    for name, variable in env_names.items():
        if env.get(variable, "").strip():
            raw[name] = (env[variable], f"{variable} (environment)")
            continue
        found = next((f for f in files if f.get(variable)), None)
        if found is not None:
            raw[name] = (found.values[variable], f"{variable} (env file {found.path})")
        elif toml_names[name] in table:
            raw[name] = (table[toml_names[name]], f"{section}.{toml_names[name]} "
                                                  f"(config file {toml.path})")
    return Layered(raw, errors, toml.path)


def parsed(found: Layered, parsers: Mapping[str, Any]
           ) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """(values, setting -> source, errors): each raw setting through its parser, which
    answers (value or None, problem or None); a problem is one line naming the source."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    errors = list(found.errors)
    for name, (value, source) in found.raw.items():
        value, problem = parsers[name](value)
        if problem:
            errors.append(f"{source}: {problem}")
        if value is not None:
            values[name], sources[name] = value, source
    return values, sources, errors


def layered_paths(env: Mapping[str, str], config_flag: str | None) -> list[str | None]:
    """Every file `layered` reads (their `signature` says when to read them again)."""
    from agentcoordd.daemon import envfiles

    return [config_path(env, config_flag)[0], *envfiles.candidates(env)]


def signature(paths: list[str | None]) -> tuple[Any, ...]:
    """What changes when one of these files is edited (reload without a restart)."""
    out: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        out.append(None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)
