"""Replay the read-only tail of a conformance scenario against the use cases.

A golden file (tests/fixtures/conformance/golden/<name>.txt) records each step's
exit code and masked JSON stdout, and the masked final state. For scenarios
whose status / batch-audit steps are the last ones, that final state *is* the
state those steps read: materialize it on a fresh root (masks → concrete
timestamps around a fixed NOW, event ids in the same order), run the command
through the use case, mask the payload with the scenario's own normalizer and
compare.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agentcoordd.coord.audit import batch_audit
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.holders import LANE_STATES
from agentcoordd.coord.status import status
from agentcoordd.model.timefmt import format_ts

MASK = re.compile(r"<NOW(?:([+-]\d+)m)?>")
EVENT = re.compile(r"<EVENT:(\d+)>")


@dataclass
class Step:
    number: int
    args: list[str]
    exit: int
    stdout: Any


def parse(text: str) -> tuple[list[Step], dict[str, Any]]:
    steps: list[Step] = []
    state: dict[str, Any] = {}
    lines = text.splitlines()
    i = 0
    section = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("## step "):
            head, _, args = line.partition(": ")
            args = re.sub(r"^\[[^\]]*\] ", "", args)
            steps.append(Step(int(head.split()[2]), shlex.split(args), 0, None))
            section = "step"
        elif line.startswith("exit="):
            steps[-1].exit = int(line[5:])
        elif line == "stdout.json:":
            j = i + 1
            while j < len(lines) and not lines[j].startswith("## "):
                j += 1
            steps[-1].stdout = json.loads("\n".join(lines[i + 1 : j]))
            i = j
            continue
        elif line.startswith("## state "):
            section = line[len("## state ") :]
        elif line.startswith("### ") and section == "<ROOT>":
            rel = line[4:]
            j = i + 1
            while j < len(lines) and not lines[j].startswith("#"):
                j += 1
            state[rel] = json.loads("\n".join(lines[i + 1 : j]))
            i = j
            continue
        i += 1
    return steps, state


def event_id(n: int) -> str:
    return f"20260613T003000.{n:06d}Z-{n:08x}"


def concrete(text: str, now: dt.datetime) -> str:
    text = MASK.sub(lambda m: format_ts(now + dt.timedelta(minutes=int(m.group(1) or 0))), text)
    text = EVENT.sub(lambda m: event_id(int(m.group(1))), text)
    return text.replace("<SRC>", "0" * 16)


def materialize(root: Path, state: dict[str, Any], now: dt.datetime) -> None:
    for rel, data in state.items():
        path = root / concrete(rel, now)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(concrete(json.dumps(data, indent=2), now) + "\n")


def normalizer(fixtures: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("ac_normalize", fixtures / "conformance" / "normalize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run(ctx: Ctx, args: list[str]) -> dict[str, Any]:
    command, rest = args[0], args[1:]
    flags: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        name = rest[i].lstrip("-").replace("-", "_")
        if name in ("json", "include_archived", "all_events"):
            flags[name] = True
            i += 1
        else:
            flags[name] = rest[i + 1]
            i += 2
    flags.pop("json", None)
    if command == "status":
        return await status(ctx, **flags)
    if command == "batch-audit":
        return await batch_audit(ctx, **flags)
    raise AssertionError(f"not a read command: {args}")


# Keys our status adds in a scenario (docs/compat.md#open-requests: the
# scenario's help/escalation requests have no answer).
ADDITIVE = {"record_event_typed_valid": ("open_requests",),
            # status --target of an active claim: the lease verdict (docs/compat.md#status-lease)
            "claim_refused_live_holder": ("lease",), "claim_refused_stale_holder": ("lease",),
            "claim_takeover_dead_heartbeat": ("lease",)}


def _pop_lane_holders(payload: dict[str, Any]) -> None:
    """What each lane row adds (docs/compat.md#lane-holders), checked present and removed."""
    for batch in payload.get("batches", []):
        for lane in batch.get("lanes", []):
            assert lane.pop("lane_state") in LANE_STATES, lane
            lane.pop("holder", None)
            lane.pop("closed_as", None)


async def replay(fixtures: Path, name: str, root: Path, ctx: Ctx, numbers: list[int]) -> None:
    steps, state = parse((fixtures / "conformance" / "golden" / f"{name}.txt").read_text())
    now = ctx.clock.now()
    materialize(root, state, now)
    norm = normalizer(fixtures)
    masker = norm.Masker(int(now.timestamp()), {})
    masker.register_events(event_id(int(n)) for n in EVENT.findall(json.dumps(state)))
    ran = []
    for step in steps:
        if step.number not in numbers:
            continue
        ran.append(step.number)
        assert step.stdout is not None, (name, step.number)
        payload = dict(await run(ctx, step.args))
        code = payload.pop("exit_code")
        payload.pop("exit_error", None)
        for key in ADDITIVE.get(name, ()):  # ours only, and present: docs/compat.md
            assert payload.pop(key), (name, step.number, key)
        _pop_lane_holders(payload)
        assert code == step.exit, (name, step.number, payload)
        assert json.loads(masker.dump(payload)) == step.stdout, (name, step.number)
    assert ran == numbers, (name, ran)
