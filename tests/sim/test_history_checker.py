"""The history checker (sim/history.py) catches what it is for: histories with a double
grant, a reused token, a stale fenced write accepted and lost acknowledged writes are
each reported with the operations involved; correct histories (unknown outcomes
included) pass."""

from __future__ import annotations

import json
from pathlib import Path

from sim.history import BEAT, GRANT, OK, REFUSED, RELEASE, UNKNOWN, WRITE, FinalState, Op, check, load


def op(i: int, agent: str, kind: str, invoke: float, ret: float | None, outcome: str = OK,
       token: int | None = None, target: str = "1") -> Op:
    return Op(f"op{i}", agent, kind, target, invoke, ret, outcome, token)


def good() -> list[Op]:
    """a holds (token 10), writes, is taken over by b (token 20) while a's late write is
    refused; an unknown grant and an unknown write in between."""
    return [
        op(1, "a", GRANT, 0.0, 0.1, token=10),
        op(2, "a", WRITE, 0.2, 0.3, token=10),
        op(3, "a", BEAT, 0.3, 0.35, token=10),
        op(4, "c", GRANT, 0.4, None, UNKNOWN),  # killed mid-call: may or may not have happened
        op(5, "b", GRANT, 5.0, 5.1, token=20),
        op(6, "a", WRITE, 5.05, 5.2, token=10),  # concurrent with b's grant: may be accepted
        op(7, "a", WRITE, 6.0, 6.1, REFUSED, token=10),
        op(8, "b", WRITE, 6.2, None, UNKNOWN, token=20),
        op(9, "b", RELEASE, 7.0, 7.1, token=20),
        op(10, "a", GRANT, 8.0, 8.1, token=30),
    ]


def test_a_correct_history_passes_with_its_unknown_outcomes() -> None:
    final = FinalState(claims={"1": {"status": "active", "fencing_token": 30}},
                       event_messages={"op2", "op6"})
    assert check(good(), final) == []


def test_a_double_grant_is_reported_with_both_grants() -> None:
    history = [op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "b", GRANT, 0.05, 0.2, token=10)]
    (found,) = check(history)
    assert found.rule == "double grant" and {o.id for o in found.ops} == {"op1", "op2"}


def test_a_reused_or_smaller_token_after_a_returned_grant_is_reported() -> None:
    for later_token in (10, 5):
        history = [op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "b", GRANT, 0.2, 0.3, token=later_token)]
        rules = {v.rule for v in check(history)}
        assert "token order" in rules or "double grant" in rules, later_token
    reused = check([op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "b", GRANT, 0.2, 0.3, token=5)])
    assert [v.rule for v in reused] == ["token order"]
    assert [o.id for o in reused[0].ops] == ["op1", "op2"]


def test_concurrent_grants_may_come_in_either_order() -> None:
    history = [op(1, "a", GRANT, 0.0, 0.5, token=20), op(2, "b", GRANT, 0.1, 0.4, token=10)]
    assert check(history) == []


def test_a_stale_fenced_write_accepted_is_reported_with_the_grants() -> None:
    history = [op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "b", GRANT, 1.0, 1.1, token=20),
               op(3, "a", WRITE, 2.0, 2.1, token=10)]
    (found,) = check(history)
    assert found.rule == "stale write" and [o.id for o in found.ops] == ["op1", "op2", "op3"]
    assert "accepted after token 20 was granted" in found.describe()


def test_writes_after_a_release_and_with_an_unknown_token_are_reported() -> None:
    history = [op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "a", RELEASE, 0.2, 0.3, token=10),
               op(3, "a", BEAT, 0.4, 0.5, token=10), op(4, "x", WRITE, 0.6, 0.7, token=99)]
    assert sorted(v.rule for v in check(history)) == ["unknown token", "write after release"]


def test_lost_acknowledged_writes_and_releases_are_reported_against_the_final_state() -> None:
    history = [op(1, "a", GRANT, 0.0, 0.1, token=10), op(2, "a", WRITE, 0.2, 0.3, token=10),
               op(3, "a", RELEASE, 0.4, 0.5, token=10)]
    final = FinalState(claims={"1": {"status": "active", "fencing_token": 10}}, event_messages=set())
    assert sorted(v.rule for v in check(history, final)) == ["lost release", "lost write"]


def test_histories_load_from_invoke_and_return_lines(tmp_path: Path) -> None:
    lines = [{"phase": "invoke", "id": "a:1", "agent": "a", "kind": GRANT, "target": 1, "t": 1.0},
             {"phase": "return", "id": "a:1", "t": 1.2, "outcome": OK, "token": 7},
             {"phase": "invoke", "id": "a:2", "agent": "a", "kind": WRITE, "target": 1, "t": 1.3,
              "token": 7}]
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{\"phase\": \"ret")
    ops = {o.id: o for o in load([path])}
    assert (ops["a:1"].outcome, ops["a:1"].token, ops["a:1"].ret) == (OK, 7, 1.2)
    assert (ops["a:2"].outcome, ops["a:2"].token, ops["a:2"].ret) == (UNKNOWN, 7, None)
