"""The comparison machinery itself (no CLI runs): parsing, diffing, allowances."""

from __future__ import annotations

import pytest

from conformance.harness import (
    SCENARIOS,
    AdditiveJson,
    Difference,
    JsonOnFailure,
    MessageMayDiffer,
    MessageMismatch,
    StateMayDiffer,
    StepMayDiffer,
    compare,
    file_matches,
    is_substructure,
    json_diff,
    markdown_anchors,
    message_mismatches,
    parse_messages,
    parse_strict,
    path_matches,
    triage,
)

STRICT = """\
# scenario: demo
# a demo
## step 1: put claims/a.json
(wrote state file directly)
## step 2: [X=1] status --json
exit=0
stdout.json:
{
  "a": 1,
  "vocab": [
    "x"
  ]
}
## step 3: claim --agent-id a
exit=1
## state <ROOT>
### claims/a.json
{
  "n": 8
}
### heartbeats/bad.json
UNPARSEABLE JSON: not json{

## state <IMPLICIT>
(no files)
"""


def test_parse_strict_reads_steps_and_states() -> None:
    s = parse_strict(STRICT)
    assert s.header == ["# scenario: demo", "# a demo"]
    assert [(x.i, x.kind, x.rc) for x in s.steps.values()] == [(1, "put", None), (2, "run", "0"),
                                                               (3, "run", "1")]
    assert s.steps[2].stdout == {"a": 1, "vocab": ["x"]}
    assert s.steps[2].label == "[X=1] status --json"
    assert s.states["<ROOT>"]["claims/a.json"] == {"n": 8}
    assert s.states["<ROOT>"]["heartbeats/bad.json"].text == "UNPARSEABLE JSON: not json{"
    assert s.states["<IMPLICIT>"] == {}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_golden_parses_and_equals_itself(name: str) -> None:
    text = SCENARIOS[name].golden.read_text(encoding="utf-8")
    golden = parse_strict(text)
    assert len(golden.steps) == text.count("\n## step ")
    assert compare(name, golden, parse_strict(text)) == []
    messages = SCENARIOS[name].golden_messages.read_text(encoding="utf-8")
    assert set(parse_messages(messages)) == set(golden.steps)
    assert message_mismatches(name, messages, messages) == []


def test_compare_reports_each_kind() -> None:
    ours = (STRICT.replace('"a": 1,', '"a": 2,\n  "extra": true,')
            .replace('    "x"\n', '    "x",\n    "y"\n')
            .replace("## step 3: claim --agent-id a\nexit=1\n",
                     "## step 3: claim --agent-id a\nexit=2\nstdout.json:\n{}\n")
            .replace('  "n": 8', '  "m": 8')
            .replace("## state <IMPLICIT>\n(no files)", "## state <IMPLICIT>\n### c.json\n[]"))
    diffs = compare("demo", parse_strict(STRICT), parse_strict(ours))
    got = {(d.kind, d.step, d.file, ".".join(d.path)) for d in diffs}
    assert got == {
        ("value", 2, None, "a"), ("key-extra", 2, None, "extra"), ("item-extra", 2, None, "vocab.1"),
        ("exit", 3, None, ""), ("stdout-json-extra", 3, None, ""),
        ("key-missing", None, "<ROOT>/claims/a.json", "n"),
        ("key-extra", None, "<ROOT>/claims/a.json", "m"),
        ("file-extra", None, "<IMPLICIT>/c.json", ""),
    }
    assert all(d.describe() for d in diffs)


def test_compare_refuses_to_pair_different_steps() -> None:
    ours = STRICT.replace("claim --agent-id a", "claim --agent-id b")
    [d] = compare("demo", parse_strict(STRICT), parse_strict(ours))
    assert d.kind == "structure"


def test_json_types_are_strict_and_lists_positional() -> None:
    assert json_diff(1, 1.0) == [("value", (), 1, 1.0)]
    assert json_diff(True, 1) == [("value", (), True, 1)]
    assert json_diff([1, 2], [1]) == [("item-missing", ("1",), 2, None)]
    assert is_substructure({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}, 4], "d": 5})
    assert not is_substructure({"a": [1, 2]}, {"a": [2, 1, 3]})
    assert not is_substructure({"a": 1, "b": 2}, {"a": 1})


def test_records_written_in_the_same_normalized_second_may_come_in_either_order() -> None:
    a = {"at": "<NOW>", "path": "events/b1/a.json"}
    b = {"at": "<NOW>", "path": "events/b1/b.json"}
    early = {"at": "<NOW-5m>", "path": "events/b1/z.json"}
    assert json_diff([early, a, b], [early, b, a]) == []
    # a different time, or a different record, still differs
    assert json_diff([a, b], [b, {**a, "at": "<NOW+1m>"}]) != []
    assert json_diff([a, b], [b, {**a, "path": "events/b1/c.json"}]) != []


def test_patterns() -> None:
    assert path_matches(("a", "b"), "a.b")
    assert path_matches(("a", "3", "b"), "a.*.b")
    assert path_matches(("x", "y", "machine_id"), "**.machine_id")
    assert path_matches(("machine_id",), "**.machine_id")
    assert not path_matches(("a", "b", "c"), "a.b")
    assert file_matches("<ROOT>/claims/acme/widgets/2.json", "<ROOT>/claims/*/widgets/*.json")
    assert not file_matches("<ROOT>/claims/acme/widgets/2.json", "<ROOT>/claims/*.json")
    assert file_matches("<ROOT>/claims/acme/widgets/2.json", "<ROOT>/claims/**")
    assert not file_matches("<IMPLICIT>/claims/1.json", "<ROOT>/claims/**")


def _d(kind: str, **kw: object) -> Difference:
    return Difference("s", kind, **kw)  # type: ignore[arg-type]


def test_allowances_cover_exactly_what_they_name() -> None:
    step = StepMayDiffer(scenario="s", steps=(2,), exit=False, stdout_paths=("reason",),
                         compat="#x", why="w")
    assert step.covers(_d("value", step=2, path=("reason",))) == "step 2"
    assert step.covers(_d("value", step=2, path=("other",))) is None
    assert step.covers(_d("exit", step=2)) is None
    assert step.covers(_d("value", step=3, path=("reason",))) is None
    assert StepMayDiffer(scenario="t", steps=(2,), compat="#x", why="w").covers(
        _d("exit", step=2)) is None  # another scenario

    state = StateMayDiffer(scenario="s", files=("<ROOT>/claims/*.json",), how=frozenset({"differ"}),
                           fields=("generation",), compat="#x", why="w")
    assert state.covers(_d("value", file="<ROOT>/claims/2.json", path=("generation",)))
    assert state.covers(_d("value", file="<ROOT>/claims/2.json", path=("target",))) is None
    assert state.covers(_d("file-missing", file="<ROOT>/claims/2.json")) is None

    add = AdditiveJson(scenario="s", steps=(1,), keys=("client_version",),
                       lists={"vocab": ("queued",)}, compat="#x", why="w")
    assert add.covers(_d("key-extra", step=1, path=("client_version",)))
    assert add.covers(_d("key-extra", step=1, path=("nested", "client_version"))) is None
    assert add.covers(_d("item-extra", step=1, path=("vocab", "7"), ours="queued"))
    assert add.covers(_d("item-extra", step=1, path=("vocab", "8"), ours="other")) is None
    assert add.covers(_d("value", step=1, path=("client_version",))) is None
    assert add.covers(_d("key-missing", step=1, path=("client_version",))) is None
    assert hash(add) == hash(add)

    fail = JsonOnFailure(scenario="s", steps=(4,), compat="#x", why="w")
    assert fail.covers(_d("stdout-json-extra", step=4, rc=("2", "2")))
    assert fail.covers(_d("stdout-json-extra", step=4, rc=("2", "0"))) is None
    assert fail.covers(_d("stdout-json-extra", step=4, rc=("0", "0"))) is None

    msg = MessageMayDiffer(scenario="s", golden="^split-brain", instead="^backend unreachable",
                           compat="#x", why="w")
    assert msg.covers(MessageMismatch("s", 3, "split-brain configuration: ...",
                                      ("backend unreachable: GET x",))) == "any step"
    assert msg.covers(MessageMismatch("s", 3, "split-brain configuration: ...",
                                      ("invalid API URL",))) is None


def test_triage_reports_used_components() -> None:
    a = StepMayDiffer(scenario="s", steps=(1, 2), compat="#x", why="w")
    left, used = triage([_d("exit", step=1), _d("exit", step=5)], [a])
    assert [d.step for d in left] == [5]
    assert used[a] == {"step 1"}  # step 2 is stale


def test_messages_prefix_or_contained() -> None:
    golden = "## step 1: x\nexit=1\nstderr:\nmissing required --reason\n"
    ours_ok = "## step 1: x\nexit=1\nstderr:\nnotice\nerror: missing required --reason (see -h)\n"
    ours_bad = "## step 1: x\nexit=1\nstderr:\n--type help_requested requires --reason\n"
    assert message_mismatches("s", golden, ours_ok) == []
    [m] = message_mismatches("s", golden, ours_bad)
    assert (m.step, m.golden) == (1, "missing required --reason")
    # stdout text is not part of the check; a line "stderr:" inside stderr stays text
    assert parse_messages("## step 1: x\nexit=0\nstdout:\nhi\nstderr:\na\nstderr:\n")[1].stderr == [
        "a", "stderr:"]


def test_markdown_anchors() -> None:
    doc = ("# Compat\n## 1. Agent ids are validated on `claim` too (`bad_ids`, step 6)\n"
           "| <a id=\"octal-integers\"></a> `--ttl 010` | decimal |\n"
           "### Split brain {#split-brain}\n## Notes\n## Notes\n```\n# not a heading\n```\n")
    anchors = markdown_anchors(doc)
    assert {"compat", "1-agent-ids-are-validated-on-claim-too-bad_ids-step-6", "octal-integers",
            "split-brain", "notes", "notes-1"} <= anchors
    assert "not-a-heading" not in anchors


def test_fixture_copies_are_verbatim() -> None:
    """The copied drivers and normalizer are byte-identical to what the fixture
    README records (refreshing them means updating that table)."""
    import hashlib
    import re

    from conformance.harness import FIXTURES

    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name in ("scenarios.sh", "scenarios2.sh", "normalize.py", "UPSTREAM-README.md"):
        m = re.search(rf"^\| `{re.escape(name)}` \|[^\n]*`([0-9a-f]{{64}})` \|$", readme, re.M)
        assert m, f"{name} has no sha256 row in {FIXTURES / 'README.md'}"
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == m.group(1), name
