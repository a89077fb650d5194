"""Replay: the same seed must give every agent the same scripted ctl calls and verdicts.

`compare(a, b)` reads two run directories and compares, per agent, the
sequence of `step` records (normalized ctl argv — batch id and pids masked —
plus the verdict: exit code, or [exit code, stop seen] for the stop check).
Timing, retries of exit-2 attempts and wait polling are not part of a step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.verify import load_logs


def step_sequences(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    seqs: dict[str, list[tuple[Any, ...]]] = {}
    for agent, rows in load_logs(out).items():
        seqs[agent] = [(r["step"], r["op"], json.dumps(r.get("argv")), r.get("name"), json.dumps(r["verdict"]))
                       for r in rows if r.get("kind") == "step"]
    return seqs


def compare(original: Path, replay: Path) -> list[str]:
    problems: list[str] = []
    pa = json.loads((original / "plan.json").read_text())
    pb = json.loads((replay / "plan.json").read_text())
    if pa != pb:
        problems.append("plans differ for the same parameters")
    a, b = step_sequences(original), step_sequences(replay)
    for agent in sorted(set(a) | set(b)):
        sa, sb = a.get(agent, []), b.get(agent, [])
        if sa == sb:
            continue
        for i, (x, y) in enumerate(zip(sa, sb)):
            if x != y:
                problems.append(f"{agent}: step {i} differs: {x} vs {y}")
                break
        else:
            problems.append(f"{agent}: {len(sa)} steps vs {len(sb)} on replay")
    return problems
