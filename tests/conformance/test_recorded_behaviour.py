"""agentcoordctl against agent-coord's recorded behaviour (tests/fixtures/conformance).

* test_scenario[NAME]: the strict contract - per step the exit code and the
  normalized JSON stdout, then every state file - equals the golden except
  for the deliberate differences of allowed.STRICT.
* test_messages[NAME]: the softer check - every stderr line agent-coord
  printed appears in one of our stderr lines of that step (ours may say more),
  except allowed.MESSAGES.
* test_text_output[NAME]: for the differential tester's scenarios (set
  "differential"), whose differences were often in text renderings: every
  step's text stdout equals agent-coord's, line for line (after masking).
* test_allowance_still_needed[ID]: every allow-list entry, and each of its
  steps / file patterns, still covers a difference (otherwise it is stale).
* test_compat_anchors_exist: every cited docs/compat.md anchor exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from conformance import allowed
from conformance.harness import (
    EVERY_SCENARIO,
    SCENARIOS,
    Runner,
    COMPAT_DOC,
    FIXTURES,
    REPO,
    Allowance,
    Difference,
    MessageMismatch,
    Run,
    compare,
    markdown_anchors,
    message_mismatches,
    parse_strict,
    text_differences,
    triage,
    unified,
)

NAMES = list(SCENARIOS)
ALL_ALLOWANCES: list[Allowance] = allowed.STRICT + allowed.MESSAGES + allowed.TEXT


def _run(conformance: Runner, name: str) -> Run:
    run = conformance.get(name)
    problem = run.problem()
    if problem:
        pytest.fail(f"{name}: cannot compare: {problem}", pytrace=False)
    return run


def _strict_differences(run: Run) -> list[Difference]:
    golden = parse_strict(run.scenario.golden.read_text(encoding="utf-8"))
    ours = parse_strict(run.strict.read_text(encoding="utf-8"))
    return compare(run.scenario.name, golden, ours)


def _message_mismatches(run: Run) -> list[MessageMismatch]:
    return message_mismatches(run.scenario.name,
                              run.scenario.golden_messages.read_text(encoding="utf-8"),
                              run.messages.read_text(encoding="utf-8"))


def _for(name: str, allowances: Sequence[Allowance]) -> list[Allowance]:
    return [a for a in allowances if a.scenario in (name, EVERY_SCENARIO)]


def _labels(run: Run) -> dict[int, str]:
    return {i: s.label for i, s in
            parse_strict(run.scenario.golden.read_text(encoding="utf-8")).steps.items()}


def _rel(path: Any) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


@pytest.mark.parametrize("scenario", NAMES)
def test_scenario(conformance: Runner, scenario: str) -> None:
    run = _run(conformance, scenario)
    diffs = _strict_differences(run)
    left, _used = triage(diffs, _for(scenario, allowed.STRICT))
    if not left:
        return
    labels = _labels(run)
    lines = [f"{scenario} ({run.scenario.set}): {len(left)} difference(s) from agent-coord not "
             f"covered by tests/conformance/allowed.py ({len(diffs) - len(left)} covered)",
             f"  driver: {run.verdict.split('  (')[0]}; ours: {run.strict}",
             f"  golden: {_rel(run.scenario.golden)}"]
    for d in left:
        label = f" [{labels.get(d.step, '')}]" if d.step is not None else ""
        lines.append(f"  - {d.describe()}{label}")
    lines += ["", "strict output, agent-coord (-) vs ours (+):",
              unified(run.scenario.golden.read_text(encoding="utf-8"),
                      run.strict.read_text(encoding="utf-8"), run.scenario.golden.name)]
    pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("scenario", NAMES)
def test_messages(conformance: Runner, scenario: str) -> None:
    run = _run(conformance, scenario)
    mismatches = _message_mismatches(run)
    left, _used = triage(mismatches, _for(scenario, allowed.MESSAGES))
    if not left:
        return
    labels = _labels(run)
    lines = [f"{scenario}: {len(left)} agent-coord stderr line(s) missing from ours (each must be "
             f"a prefix of, or contained in, one of our stderr lines of the same step; "
             f"documented wording differences go to allowed.MESSAGES)",
             f"  golden: {_rel(run.scenario.golden_messages)}; ours: {run.messages}"]
    for m in left:
        lines.append(f"  - {m.describe(labels.get(m.step, ''))}")
    pytest.fail("\n".join(lines), pytrace=False)


def _text_differences(run: Run) -> list[Difference]:
    return [d for d in text_differences(run.scenario.name,
                                        run.scenario.golden_messages.read_text(encoding="utf-8"),
                                        run.messages.read_text(encoding="utf-8"))
            if d.kind == "stdout-text"]


@pytest.mark.parametrize("scenario", [n for n in NAMES if SCENARIOS[n].set == "differential"])
def test_text_output(conformance: Runner, scenario: str) -> None:
    run = _run(conformance, scenario)
    diffs, _used = triage(_text_differences(run), _for(scenario, allowed.TEXT))
    if not diffs:
        return
    labels = _labels(run)
    lines = [f"{scenario}: text stdout differs from agent-coord in {len(diffs)} step(s)",
             f"  golden: {_rel(run.scenario.golden_messages)}; ours: {run.messages}"]
    for d in diffs:
        lines += [f"  - step {d.step} [{labels.get(d.step, '')}]",
                  unified(d.golden, d.ours, "agent-coord")]
    pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("allowance", ALL_ALLOWANCES, ids=lambda a: a.id)
def test_allowance_still_needed(conformance: Runner, allowance: Allowance) -> None:
    everywhere = allowance.scenario == EVERY_SCENARIO
    used_parts: set[str] = set()
    for name in (NAMES if everywhere else [allowance.scenario]):
        run = _run(conformance, name)
        if allowance in allowed.STRICT:
            items: list[Any] = _strict_differences(run)
            family = allowed.STRICT
        elif allowance in allowed.TEXT:
            items = _text_differences(run)
            family = allowed.TEXT
        else:
            items = _message_mismatches(run)
            family = allowed.MESSAGES
        _left, used = triage(items, _for(name, family))
        used_parts |= used[allowance]
    stale = [c for c in allowance.components() if c not in used_parts]
    if stale:
        pytest.fail(f"stale allowance {allowance.id} ({allowance.compat}): "
                    f"{', '.join(stale)} no longer differ(s) that way from agent-coord - "
                    f"remove it (or the stale part) from tests/conformance/allowed.py",
                    pytrace=False)


def test_allow_list_is_well_formed() -> None:
    problems = []
    ids = [a.id for a in ALL_ALLOWANCES]
    problems += [f"duplicate entry {i}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for a in ALL_ALLOWANCES:
        if a.scenario == EVERY_SCENARIO:
            continue
        if a.scenario not in SCENARIOS:
            problems.append(f"{a.id}: no scenario {a.scenario!r}")
            continue
        if not a.compat.startswith("#") or len(a.compat) < 2:
            problems.append(f"{a.id}: compat must be a docs/compat.md anchor '#...'")
        if not a.why.strip():
            problems.append(f"{a.id}: no reason (why)")
        golden = parse_strict(SCENARIOS[a.scenario].golden.read_text(encoding="utf-8"))
        for step in getattr(a, "steps", None) or ():
            if step not in golden.steps or golden.steps[step].kind != "run":
                problems.append(f"{a.id}: scenario has no CLI step {step}")
        for pattern in getattr(a, "files", ()):
            if not any(pattern.startswith(f"{token}/") for token in golden.states):
                problems.append(f"{a.id}: {pattern!r} names none of the state roots "
                                f"{', '.join(golden.states)}")
    assert not problems, "\n".join(problems)


def test_compat_anchors_exist() -> None:
    cited: dict[str, list[str]] = {}
    for a in ALL_ALLOWANCES:
        cited.setdefault(a.compat.lstrip("#"), []).append(a.id)
    anchors = markdown_anchors(COMPAT_DOC.read_text(encoding="utf-8"))
    missing = {k: v for k, v in sorted(cited.items()) if k not in anchors}
    if missing:
        pytest.fail(
            f"{len(missing)} anchor(s) cited by tests/conformance/allowed.py are missing from "
            f"docs/compat.md; give each documented difference its row/heading with that "
            f"anchor (e.g. <a id=\"octal-integers\"></a> in the row, or a heading whose "
            f"GitHub slug it is):\n"
            + "\n".join(f"  #{k}  (cited by {', '.join(v)})" for k, v in missing.items()),
            pytrace=False)


def test_scenarios_have_goldens() -> None:
    declared = [s.name for s in SCENARIOS.values()]
    assert len(declared) == len(set(declared)) == len(NAMES)
    missing = [f"{s.name}: {_rel(p)}" for s in SCENARIOS.values()
               for p in (s.golden, s.golden_messages) if not p.is_file()]
    recorded = {p.name.split(".")[0] for d in ("golden", "golden2", "golden3")
                for p in (FIXTURES / d).glob("*.txt")}
    orphans = sorted(recorded - set(declared))
    assert not missing and not orphans, f"missing goldens: {missing}; goldens of no scenario: {orphans}"
