"""Lane dependencies (pure): how a lane names its dependencies, and cycles.

A lane's `depends_on` is one ref or a list of refs `<batch-id>:<lane>`. The
dependency graph has (batch, lane) nodes; a cycle can never be satisfied, so
registration (and `validate --family batch`) refuses one, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError

Node = tuple[str, str]  # (batch id, lane name)


def lane_name_of(lane: object) -> str | None:
    """The lane's name (`name`, legacy `id`) when it is a non-empty string."""
    if not isinstance(lane, dict):
        return None
    name = lane.get("name") if "name" in lane else lane.get("id")
    return name if isinstance(name, str) and name else None


def lane_dependencies(lane: object) -> list[str]:
    """`depends_on` as a list of refs: a string is one ref, an array many."""
    if not isinstance(lane, dict):
        return []
    raw = lane.get("depends_on")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    return [item if isinstance(item, str) else msgspec.json.encode(item).decode() for item in items if item is not None]


def split_dependency(ref: object) -> tuple[str, str] | None:
    """`<batch-id>:<lane>` split at the LAST colon (batch ids may contain `:`).

    None when the ref has no colon, an empty half, an unsafe batch id or an
    invalid lane name.
    """
    if not isinstance(ref, str):
        return None
    batch, sep, lane = ref.rpartition(":")
    if not sep or not batch or not lane:
        return None
    try:
        ids.batch_id(batch)
        ids.lane_name(lane)
    except UsageError:
        return None
    return batch, lane


def dependency_edges(batch_id: str, lanes: object) -> dict[Node, list[Node]]:
    """Each lane of a batch and the (batch, lane) nodes it depends on."""
    edges: dict[Node, list[Node]] = {}
    for lane in lanes if isinstance(lanes, list) else []:
        name = lane_name_of(lane)
        if name is not None:
            edges[(batch_id, name)] = [parts for ref in lane_dependencies(lane)
                                       if (parts := split_dependency(ref)) is not None]
    return edges


def find_cycle(edges: Mapping[Node, list[Node]]) -> list[Node] | None:
    """A dependency cycle as its path (first node repeated at the end), or None.
    Iterative depth-first search: a 10,000-lane chain needs no recursion."""
    done: set[Node] = set()
    for start in edges:
        if start in done:
            continue
        path: list[Node] = [start]
        on_path = {start}
        stack = [iter(edges.get(start, ()))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(edges.get(nxt, ())))
    return None


def cycle_message(cycle: list[Node]) -> str:
    """One line naming the cycle (long ones shortened)."""
    shown = " -> ".join(f"{batch}:{lane}" for batch, lane in cycle)
    if len(shown) > 160:
        shown = shown[:157] + "..."
    shown = shown.encode("unicode_escape", "backslashreplace").decode("ascii")
    return f"batch lane {cycle[0][1]} has a dependency cycle of {len(cycle) - 1} lane(s): {shown}"
