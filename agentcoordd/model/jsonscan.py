"""JSON text read without parsing it: nesting depth, top-level fields, array members.

Parsers recurse once per nesting level (msgspec and Python's json stop at the
interpreter's recursion limit, about 1,000 levels), so text that may be deeper
is measured first, by these scans, which never recurse:

* `depth(raw)`: how deep arrays and objects nest (0 for a scalar);
* `scan(raw, keys)`: the deepest nesting, and the scalar values of the named
  keys of the top-level object (an MCP request's `id`, a listing entry's
  `path`), found even when another member cannot be parsed at all;
* `members(raw, key)`: the byte spans of the members of the top-level
  object's array `key` (the entries of a listing page), so each can be judged
  on its own.

Strings are skipped whole (a bracket inside one does not count); the text is
assumed to be JSON, and malformed text gives a best effort, never an error.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Strings (escapes skipped whole), brackets and separators, and bare scalars.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENERS = (ord("["), ord("{"))


def depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in `raw`."""
    if raw.count(b"[") + raw.count(b"{") <= 1:
        return 1 if raw.lstrip()[:1] in (b"[", b"{") else 0
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    level = deepest = 0
    for byte in brackets:
        if byte in _OPENERS:
            level += 1
            if level > deepest:
                deepest = level
        else:
            level -= 1
    return deepest


def strings(raw: bytes) -> list[bytes]:
    """The string tokens of `raw`, quotes included."""
    return _STRING.findall(raw)


def within(raw: bytes, limit: int) -> bool:
    """depth(raw) <= limit; at C speed when there are no more brackets than that."""
    return raw.count(b"[") + raw.count(b"{") <= limit or depth(raw) <= limit


def _scalar(token: bytes) -> Any:
    try:
        return json.loads(token)
    except ValueError:
        return None


def scan(raw: bytes, keys: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    """(deepest nesting, {key: value} for the scalar members `keys` of the top-level
    object). A key whose value is an array or object is left out."""
    wanted = {json.dumps(key).encode(): key for key in keys}
    found: dict[str, Any] = {}
    level = deepest = 0
    previous = b""
    pending: str | None = None  # the key whose value comes next
    for match in _TOKEN.finditer(raw):
        token = match.group()
        first = token[:1]
        if first in (b"[", b"{"):
            level += 1
            deepest = max(deepest, level)
            pending = None
        elif first in (b"]", b"}"):
            level -= 1
        elif level == 1:
            if pending is not None and token not in (b":", b","):
                found.setdefault(pending, _scalar(token))
                pending = None
            elif token == b":" and previous in wanted:
                pending = wanted[previous]
        previous = token if level == 1 else b""
    return deepest, found


def members(raw: bytes, key: str) -> list[bytes] | None:
    """The members of the array under `key` in the top-level object, as byte spans;
    None when there is no such array."""
    name = json.dumps(key).encode()
    level = 0
    previous = key_before = b""
    inside = False  # in the wanted array (its members sit at level 2)
    start: int | None = None
    spans: list[bytes] = []
    for match in _TOKEN.finditer(raw):
        token = match.group()
        first = token[:1]
        if inside and level == 2 and start is None and token not in (b",", b"]"):
            start = match.start()
        if first in (b"[", b"{"):
            if level == 1 and previous == b":" and first == b"[" and key_before == name:
                inside = True
            level += 1
        elif first in (b"]", b"}"):
            level -= 1
            if inside and level == 1:  # the array closed
                if start is not None:
                    spans.append(raw[start:match.start()].rstrip())
                return spans
        if inside and level == 2 and token == b"," and start is not None:
            spans.append(raw[start:match.start()].rstrip())
            start = None
        if level == 1 and first == b'"':
            key_before = token
        previous = token if level == 1 else b""
    return None
