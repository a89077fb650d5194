"""Consumer env files: where a machine's fleet backend is configured once.

Where they are and how a line is read follow `agent-coord` exactly (its
`consumer_env_files`, `consumer_api_url_configured?` and
`consumer_env_assignment_value`); docs/compat.md#split-brain-env-parsing and
#split-brain-unusable-env-file list the few deliberate differences.

Locations, in order, duplicates dropped: `AGENT_COORD_ENV_FILE` (as given, when
not empty), then `$XDG_CONFIG_HOME/agent-coord/env` and `…/http-env.sh`, with
`$HOME/.config` standing in for an unset or empty `XDG_CONFIG_HOME` (a relative
one is used as it is, relative to the caller's directory; no HOME, no
conventional files).

Lines (split on `\\n` only; nothing is executed):

* an assignment is `KEY=value` after optional leading whitespace and an
  optional `export` + whitespace; `KEY = v`, `exportKEY=v` and every other line
  (comments, `if …`, `source …`) are not assignments and are skipped;
* the value is what a shell would leave in the variable, read as one word:
  quoted and unquoted pieces concatenate (`""https://x` → `https://x`), quotes
  are not escapes (`'a'\\''b'` → `a\\b`), unquoted whitespace (`[ \\t\\n\\v\\f\\r]`,
  so a CRLF line's `\\r` too) ends it, so do `; & | < > ( )`; a `#` is an
  ordinary character (only a `#` after whitespace starts a comment, and
  whitespace has already ended the word: `KEY= # x` is empty, `KEY=#x` is
  `#x`, `KEY=https://h#frag` keeps the fragment); `$VAR` stays literal; an
  unterminated quote takes the rest of the line verbatim (`KEY="https://x` →
  `https://x`); quoted whitespace counts (`KEY="  "` → two spaces);
* an empty value configures nothing; a key is configured by any line that
  gives it a non-empty value, and the last such line gives the value (an empty
  assignment later in the file does not unset it: agent-coord's question is
  "does any line configure it").
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_ENV_FILE = 64 * 1024
RUBY_WHITESPACE = " \t\n\v\f\r"  # Ruby's /\s/ (ASCII only, unlike Python's)
WORD_ENDS = frozenset(RUBY_WHITESPACE + ";&|<>()")
_ASSIGNMENT = re.compile(r"[ \t\n\v\f\r]*(?:export[ \t\n\v\f\r]+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)",
                         re.DOTALL)


@dataclass(frozen=True)
class EnvFile:
    path: str  # as the caller names it (relative paths stay relative, as agent-coord prints them)
    values: dict[str, str] = field(default_factory=dict)  # non-empty values only
    # Exists but could not be used. `values` then holds what agent-coord would
    # have read before giving up (the lines before the first non-UTF-8 one).
    error: str | None = None

    def get(self, name: str) -> str | None:
        return self.values.get(name) or None


def candidates(env: Mapping[str, str]) -> list[str]:
    """The consumer env file locations, in agent-coord's order, as it names them."""
    config = env.get("XDG_CONFIG_HOME", "")
    if not config:
        home = env.get("HOME", "")
        config = os.path.join(home, ".config") if home else ""
    paths = [env.get("AGENT_COORD_ENV_FILE", "")]
    if config:
        paths += [os.path.join(config, "agent-coord", name) for name in ("env", "http-env.sh")]
    out: list[str] = []
    for path in paths:
        if path and path not in out:
            out.append(path)
    return out


def assignment_value(raw: str) -> str:
    """The value a shell would assign from the text after `KEY=` (one word)."""
    value: list[str] = []
    index, length = 0, len(raw)
    while index < length:
        char = raw[index]
        if char in "\"'":
            close = raw.find(char, index + 1)
            if close < 0:  # unterminated: a broken file; keep the rest (errs toward "configured")
                value.append(raw[index + 1:])
                break
            value.append(raw[index + 1:close])
            index = close + 1
        elif char in WORD_ENDS:
            break
        else:
            value.append(char)
            index += 1
    return "".join(value)


def assignment(line: str) -> tuple[str, str] | None:
    """(KEY, value) when the line (without its `\\n`) is an assignment, else None."""
    match = _ASSIGNMENT.fullmatch(line)
    if match is None:
        return None
    return match.group(1), assignment_value(match.group(2))


def parse(text: str) -> dict[str, str]:
    """Every configured key of the file's text: the last non-empty value wins."""
    values: dict[str, str] = {}
    for line in text.split("\n"):
        found = assignment(line)
        if found is not None and found[1]:
            values[found[0]] = found[1]
    return values


def parse_bytes(raw: bytes) -> tuple[dict[str, str], str | None]:
    """Values and an error: a line that is not UTF-8 stops the reading there, as
    agent-coord's does (it sees only the lines before it)."""
    values: dict[str, str] = {}
    for number, chunk in enumerate(raw.split(b"\n"), 1):
        try:
            line = chunk.decode("utf-8")
        except UnicodeDecodeError:
            return values, f"line {number} is not UTF-8 text"
        found = assignment(line)
        if found is not None and found[1]:
            values[found[0]] = found[1]
    return values, None


def load(path: str, cwd: str = "") -> EnvFile | None:
    """None when the file does not exist; an EnvFile with `error` when unusable.

    A relative path is the caller's (`cwd`). Opened non-blocking so a FIFO never
    stalls the daemon; a character device such as /dev/null is read like a file.
    """
    where = os.path.join(cwd, path) if cwd else path
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return EnvFile(path, error="is a directory")
    except OSError as exc:
        return EnvFile(path, error=exc.strerror or str(exc))
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return EnvFile(path, error="is a directory")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_ENV_FILE:
            chunk = os.read(fd, MAX_ENV_FILE + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except BlockingIOError:
        return EnvFile(path, error="not ready for reading (a FIFO without data?)")
    except OSError as exc:
        return EnvFile(path, error=exc.strerror or str(exc))
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_ENV_FILE:
        # What agent-coord would see of it (complete lines of the first part), for messages only.
        values, _ = parse_bytes(raw[:MAX_ENV_FILE].rsplit(b"\n", 1)[0])
        return EnvFile(path, values, error=f"larger than {MAX_ENV_FILE} bytes")
    values, error = parse_bytes(raw)
    return EnvFile(path, values, error)


def existing(env: Mapping[str, str], cwd: str = "") -> list[EnvFile]:
    """Every consumer env file that exists, in order (unusable ones included)."""
    found = []
    for path in candidates(env):
        loaded = load(path, cwd)
        if loaded is not None:
            found.append(loaded)
    return found


def configuring_api_url(files: list[EnvFile]) -> str | None:
    """The first file that configures AGENT_COORD_API_URL, as agent-coord decides it."""
    return next((f.path for f in files if f.get("AGENT_COORD_API_URL")), None)
