"""`agentcoordctl docs [TOPIC]`: the operations guides, from the installed package.

Messages point at a guide as `agentcoordctl docs TOPIC` rather than a docs/ path a
wheel user does not have. The guides are the files of the top-level docs/ folder,
installed as the data package `agentcoord_docs` (one copy, mapped in pyproject.toml).
"""

from __future__ import annotations

import difflib
from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import JSON, dump_json, fail
from agentcoordctl.spec import Arg
from agentcoordd import protocol as p


def guides() -> dict[str, Any]:
    """topic -> its Markdown file (docs/TOPIC.md)."""
    from importlib.resources import files

    return {item.name.removesuffix(".md"): item for item in files("agentcoord_docs").iterdir()
            if item.name.endswith(".md")}


def title(text: str) -> str:
    """A guide's first heading, without its hashes."""
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def docs(*, topic: str | None, json: bool) -> None:
    found = guides()
    if topic is None:
        rows = {name: title(found[name].read_text(encoding="utf-8")) for name in sorted(found)}
        if json:
            print(dump_json({"topics": rows}))
            return
        width = max(map(len, rows), default=0)
        print("\n".join(f"{name:<{width}}  {heading}" for name, heading in rows.items()))
        print("\nagentcoordctl docs TOPIC prints one.")
        return
    name = topic.split("#", 1)[0].removeprefix("docs/").removesuffix(".md")
    if name not in found:
        close = difflib.get_close_matches(name, found, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise fail(f"unknown docs topic: {topic} (want one of: {', '.join(sorted(found))}){hint}",
                   p.EXIT_USAGE)
    text = found[name].read_text(encoding="utf-8")
    print(dump_json({"topic": name, "text": text}) if json else text, end="" if not json else "\n")


COMMANDS = (
    spec.Command(("docs",), "The operations guides (fencing, capacity, security and more): a list, "
                 "or one guide's text.",
                 (Arg("topic", "[TOPIC]", "A guide's name, as the list shows it.", default=None),
                  JSON), docs),
)
