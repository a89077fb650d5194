"""docs/capacity.md runs as written: every ```console block's commands against a real
daemon on a local root, in order, each printing what the page shows (stderr, then
stdout) and exiting as shown (`[exit N]`; 0 when not shown). Times and fencing tokens
differ from run to run and are compared as placeholders; the ```json block is the
`wave-9.json` the page registers."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from .helpers import Daemon

PAGE = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
TOKEN = re.compile(r"fencing token \d+")
FAR_FUTURE = "2099-"  # a time the page chose (a reset): compared as written


def _normal(text: str) -> str:
    text = TOKEN.sub("fencing token N", text)
    return TIME.sub(lambda m: m.group(0) if m.group(0).startswith(FAR_FUTURE) else "<time>", text)


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _steps() -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for block in _blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def test_every_command_of_the_page_works_as_written(daemon: Daemon) -> None:
    (json_block,) = _blocks("json")
    (daemon.base / "wave-9.json").write_text(json_block)
    env: dict[str, str] = {}
    steps = _steps()
    assert len(steps) > 15
    for command, shown in steps:
        words = shlex.split(command)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
            continue
        assert words[0] == "agentcoordctl", command
        code = 0
        if shown and shown[-1].startswith("[exit "):
            code = int(shown.pop()[len("[exit "):-1])
        done = daemon.ctl(*words[1:], env=env)
        printed = (done.stderr + done.stdout).decode()
        assert (done.returncode, _normal(printed)) == (code, _normal("".join(f"{s}\n" for s in shown))), command
