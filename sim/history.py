"""The history checker: are leases safe in what clients saw? (issue 43)

A history is every coordination call a fleet made, as its client saw it: who,
what, on which target, when it was invoked and when it returned (one host's
monotonic clock), and its outcome — `ok` (with the grant's token), `refused`
(exit 3: a claim refused, a superseded token), or `unknown`: the call timed
out, its daemon died under it, or its process was killed before it returned
(`ret` is then None: it may have taken effect at any time after `invoke`).

The model, per target (checked from the history and the final state alone):

1. **Grants are linearizable.** Every grant (`grant`, ok: a claim or a
   renewal, with its `token`) — tokens are unique to one holder, and whenever
   one grant returned before another was invoked, the later one's token is
   larger (a renewal keeps its token, so it is the same grant again).
2. **No two holders can act.** A fenced write (`write`, `beat`: a write that
   named its grant's token) that was accepted must have been made while its
   token was current at some point between invoke and return: it is a
   violation when a grant with a larger token, or an acknowledged release of
   that token, had already returned before the write was invoked; and a token
   no grant handed out cannot be used at all.
3. **Nothing acknowledged is lost.** Every accepted write (`write`: an event
   carrying its op id as `message`) is in the final state's events, and a
   target whose final claim is active does not hold a token whose release
   was acknowledged.

Unknown outcomes only ever excuse: they grant no token we could hold against
anyone and are never required in the final state. `check` returns one
violation per problem, naming the operations involved.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRANT, WRITE, BEAT, RELEASE = "grant", "write", "beat", "release"
OK, REFUSED, UNKNOWN = "ok", "refused", "unknown"
FENCED_WRITES = (WRITE, BEAT)


@dataclass(frozen=True)
class Op:
    """One call as its client saw it."""

    id: str
    agent: str
    kind: str  # grant | write | beat | release
    target: str
    invoke: float
    ret: float | None  # None: never returned (its process died)
    outcome: str  # ok | refused | unknown
    token: int | None = None  # grant: the token granted; others: the token named

    def describe(self) -> str:
        ret = "never" if self.ret is None else f"{self.ret:.3f}"
        return (f"{self.id} {self.agent} {self.kind} #{self.target} token={self.token} "
                f"[{self.invoke:.3f}, {ret}] {self.outcome}")


@dataclass
class FinalState:
    """What the backend holds at the end: each target's claim, and the events' messages."""

    claims: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    event_messages: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Violation:
    rule: str
    target: str
    detail: str
    ops: tuple[Op, ...]

    def describe(self) -> str:
        return f"{self.rule} on #{self.target}: {self.detail}\n" + "\n".join(
            f"    {op.describe()}" for op in self.ops)


def load(paths: Iterable[Path]) -> list[Op]:
    """Ops from history files: an `invoke` line when a call starts, a `return` line when
    it ends (a call with no return line never returned: unknown)."""
    invoked: dict[str, dict[str, Any]] = {}
    returned: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by a SIGKILL
            (invoked if row.get("phase") == "invoke" else returned)[row["id"]] = row
    ops = []
    for op_id, start in invoked.items():
        end = returned.get(op_id)
        outcome = end["outcome"] if end is not None else UNKNOWN
        token = end.get("token") if end is not None and start["kind"] == GRANT else start.get("token")
        ops.append(Op(op_id, start["agent"], start["kind"], str(start["target"]), start["t"],
                      end["t"] if end is not None else None, outcome, token))
    return ops


def check(ops: list[Op], final: FinalState | None = None) -> list[Violation]:
    by_target: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_target[op.target].append(op)
    violations: list[Violation] = []
    for target, target_ops in sorted(by_target.items()):
        violations += _grants(target, target_ops)
        violations += _fenced_writes(target, target_ops)
        if final is not None:
            violations += _final(target, target_ops, final)
    return violations


def _ok(ops: list[Op], *kinds: str) -> list[Op]:
    return [op for op in ops if op.kind in kinds and op.outcome == OK]


def _grants(target: str, ops: list[Op]) -> list[Violation]:
    out = []
    grants = sorted(_ok(ops, GRANT), key=lambda op: op.invoke)
    holders: dict[int, Op] = {}
    for grant in grants:
        first = holders.setdefault(grant.token, grant)  # type: ignore[arg-type]
        if first.agent != grant.agent:
            out.append(Violation("double grant", target, f"token {grant.token} granted to "
                                 f"{first.agent} and to {grant.agent}", (first, grant)))
    by_return = sorted((g for g in grants if g.ret is not None), key=lambda op: op.ret)  # type: ignore[arg-type, return-value]
    for later in grants:
        # every grant that returned before `later` was invoked must carry a smaller token
        for earlier in by_return:
            if earlier.ret >= later.invoke:  # type: ignore[operator]
                break
            if earlier.token != later.token and earlier.token >= later.token:  # type: ignore[operator]
                out.append(Violation("token order", target, f"grant with token {later.token} "
                                     f"invoked after a grant with token {earlier.token} returned",
                                     (earlier, later)))
    return out


def _fenced_writes(target: str, ops: list[Op]) -> list[Violation]:
    out = []
    granted = {g.token: g for g in _ok(ops, GRANT)}
    supersedes = [g for g in _ok(ops, GRANT) if g.ret is not None]
    releases = [r for r in _ok(ops, RELEASE) if r.ret is not None]
    for write in _ok(ops, *FENCED_WRITES):
        if write.token not in granted:
            out.append(Violation("unknown token", target, f"accepted {write.kind} named token "
                                 f"{write.token}, which no grant handed out", (write,)))
            continue
        later = [g for g in supersedes if g.token > write.token and g.ret < write.invoke]  # type: ignore[operator]
        if later:
            first = min(later, key=lambda g: g.ret)  # type: ignore[arg-type, return-value]
            out.append(Violation("stale write", target, f"{write.kind} with token {write.token} "
                                 f"accepted after token {first.token} was granted",
                                 (granted[write.token], first, write)))  # type: ignore[index]
        ended = [r for r in releases if r.token == write.token and r.ret < write.invoke]  # type: ignore[operator]
        if ended:
            out.append(Violation("write after release", target, f"{write.kind} with token "
                                 f"{write.token} accepted after its release returned",
                                 (ended[0], write)))
    return out


def _final(target: str, ops: list[Op], final: FinalState) -> list[Violation]:
    out = []
    for write in _ok(ops, WRITE):
        if write.id not in final.event_messages:
            out.append(Violation("lost write", target, f"accepted event {write.id} is not in the "
                                 "final state", (write,)))
    claim = final.claims.get(target)
    if claim and claim.get("status") == "active":
        token = claim.get("fencing_token")
        released = [r for r in _ok(ops, RELEASE) if r.token == token]
        if released:  # (a grant after a release is a new grant, with a new token)
            out.append(Violation("lost release", target, f"the final claim is active with token "
                                 f"{token}, whose release was acknowledged", tuple(released)))
    return out


def summary(ops: list[Op], violations: list[Violation]) -> dict[str, Any]:
    count = lambda kind, outcome=None: sum(  # noqa: E731 - a local counter
        1 for op in ops if op.kind == kind and (outcome is None or op.outcome == outcome))
    return {
        "operations": len(ops),
        "grants": count(GRANT, OK), "claims_refused": count(GRANT, REFUSED),
        "fenced_writes_accepted": sum(count(k, OK) for k in FENCED_WRITES),
        "fenced_writes_refused": sum(count(k, REFUSED) for k in FENCED_WRITES),
        "releases": count(RELEASE, OK),
        "unknown": sum(1 for op in ops if op.outcome == UNKNOWN),
        "targets": len({op.target for op in ops}),
        "violations": len(violations),
    }
