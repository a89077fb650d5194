"""Replay: the same seed gives every agent the same scripted calls and verdicts;
and the verifier is not vacuous (tampered records are caught)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.plan import Params, make_plan
from sim.replay import compare
from sim.run import run
from sim.verify import verify

PARAMS = Params(agents=6, lanes=12, seed=5, chaos=("crash", "handoff", "takeover", "stop"))


def test_same_seed_gives_byte_identical_plans() -> None:
    assert make_plan(PARAMS).dumps() == make_plan(PARAMS).dumps()


def test_another_seed_gives_another_plan() -> None:
    other = Params(agents=6, lanes=12, seed=6, chaos=PARAMS.chaos)
    assert make_plan(PARAMS).dumps() != make_plan(other).dumps()


@pytest.fixture(scope="module")
def first_run() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="acsim-replay."))
    try:
        run(PARAMS, path, backend="local", duration=240)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replay_makes_the_same_calls_with_the_same_verdicts(first_run: Path, run_dir: Path) -> None:
    run(PARAMS, run_dir, backend="local", duration=240)

    assert verify(first_run)["violations"] == []
    assert verify(run_dir)["violations"] == []
    assert compare(first_run, run_dir) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_catches_two_holders_at_once(first_run: Path, run_dir: Path) -> None:
    shutil.copytree(first_run, run_dir, dirs_exist_ok=True)
    log = next(p for p in sorted((run_dir / "agents").glob("a*.jsonl"))
               if '"end_reason": "terminal"' in p.read_text())
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    hold = next(r for r in rows if r.get("kind") == "hold" and r["end_reason"] == "terminal")
    intruder = dict(hold, agent="a999", start_wall=hold["start_wall"] + 0.01, claim_t0_wall=hold["start_wall"])
    (run_dir / "agents" / "a999.jsonl").write_text(json.dumps(intruder) + "\n")

    violations = verify(run_dir)["violations"]

    assert any(v.startswith("two holders") for v in violations)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_catches_a_duplicated_event(first_run: Path, run_dir: Path) -> None:
    shutil.copytree(first_run, run_dir, dirs_exist_ok=True)
    state = json.loads((run_dir / "state.json").read_text())
    events = state["status"]["events"]
    events.append(dict(events[0], event_id="dup", path="events/x/dup.json"))
    (run_dir / "state.json").write_text(json.dumps(state))

    violations = verify(run_dir)["violations"]

    assert any(v.startswith("duplicated event") for v in violations)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_runs_live_feed_printed_every_event_once(first_run: Path) -> None:
    summary = verify(first_run)["summary"]

    assert summary["feed_events"] == summary["events"] > 0
    assert summary["feed_missing"] == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_catches_a_feed_that_lost_repeated_or_reordered_events(first_run: Path,
                                                                     run_dir: Path) -> None:
    shutil.copytree(first_run, run_dir, dirs_exist_ok=True)
    lines = (run_dir / "feed.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    first, second = next((a, b) for a, b in zip(rows, rows[1:])
                         if (a["at"], a["event_id"]) < (b["at"], b["event_id"]))
    lost = rows[-1]
    tampered = [r for r in rows if r is not lost]
    tampered.append(dict(rows[0]))  # repeated
    i = tampered.index(first)
    tampered[i], tampered[i + 1] = tampered[i + 1], tampered[i]  # reordered, not marked late
    (run_dir / "feed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tampered))

    violations = verify(run_dir)["violations"]

    assert any(f"event {lost['event_id']} ({lost['type']}) never printed" in v for v in violations)
    assert any(f"event {rows[0]['event_id']} ({rows[0]['type']}) printed 2 times" in v
               for v in violations)
    assert any("out of order without `late`" in v for v in violations)
