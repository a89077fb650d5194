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
# What a dependency ref is (agent-coord's rule): the depended-on lane's batch id and
# name, even for a lane of the same batch.
DEPENDENCY_REF_FORM = "<batch-id>:<lane>"


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


def invalid_dependency_refs(lane: object) -> list[object]:
    """The refs of a lane's `depends_on` (one ref or a list) that split_dependency
    refuses: register-batch and `validate --family batch` apply this one rule."""
    if not isinstance(lane, dict) or lane.get("depends_on") is None:
        return []
    deps = lane["depends_on"]
    return [ref for ref in (deps if isinstance(deps, list) else [deps]) if split_dependency(ref) is None]


def invalid_dependency_message(lane: str, shown_ref: str, batch_id: str | None = None) -> str:
    """agent-coord's words, then the form it expects (with this batch's id as the example)."""
    example = f", e.g. {batch_id}:{shown_ref}" if batch_id and ":" not in shown_ref and shown_ref else ""
    return (f"batch lane {lane} has invalid dependency ref: {shown_ref} "
            f"(expected {DEPENDENCY_REF_FORM}{example})")


def unknown_own_lanes(batch_id: str, lanes: object) -> list[tuple[str, str]]:
    """(lane, ref) for each valid ref to a lane of this same batch that it does not have."""
    lanes = lanes if isinstance(lanes, list) else []
    names = {name for lane in lanes if (name := lane_name_of(lane)) is not None}
    return [(lane_name_of(lane) or "", ref) for lane in lanes for ref in lane_dependencies(lane)
            if (parts := split_dependency(ref)) is not None and parts[0] == batch_id
            and parts[1] not in names]


def unknown_lane_message(lane: str, shown_ref: str) -> str:
    return f"batch lane {lane} depends on unknown lane {shown_ref}"


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
    return (f"batch lane {cycle[0][1]} has a dependency cycle of {len(cycle) - 1} lane(s): "
            f"{ids.shown(shown, 160)}")
