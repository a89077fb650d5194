"""The ctl parser parses as agent-coord's OptionParser does (recorded cases, from the
conformance sets and the tool itself) and keeps its promises on any argument list
(generated): abbreviations and `--opt=value` mean what the full spelling means, and
every refusal is one line in agent-coord's words."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordctl import cli, spec
from agentcoordctl.options import TIMEOUT

DECLARED = cli.declarations()
BY_LABEL = {command.label: command for command in DECLARED}
REFUSALS = ("invalid option: ", "ambiguous option: ", "missing argument: ", "needless argument: ",
            "invalid argument: ", "unexpected arguments: ", "missing required ",
            "--deep is only valid for doctor", "terminal-only options require --type lane_closed",
            "--launch-prompt is only valid for register-batch")


def parse(label: str, *argv: str) -> dict[str, Any]:
    return spec.parse(BY_LABEL[label], list(argv), (TIMEOUT,))[0]


def refusal(label: str, *argv: str) -> str:
    with pytest.raises(spec.UsageProblem) as excinfo:
        spec.parse(BY_LABEL[label], list(argv), (TIMEOUT,))
    return excinfo.value.message


CLAIM = ("--agent-id", "agent-a", "--repo", "acme/widgets")


@pytest.mark.parametrize(("argv", "values"), [
    (("--ag", "a", "--rep", "acme/w", "--tar", "1"), {"agent_id": "a", "repo": "acme/w", "target": "1"}),
    (("--a-i", "a", "--REPO", "acme/w", "--target=1"), {"agent_id": "a", "repo": "acme/w", "target": "1"}),
    (("--agent_id", "a", "--repo", "acme/w", "--target", "-1"), {"agent_id": "a", "target": "-1"}),
    ((*CLAIM, "--target", "3", "--target", "4"), {"target": "4"}),
    ((*CLAIM, "--target", "1", "--bat=b1", "--sy"), {"batch_id": "b1"}),
    ((*CLAIM, "--target", "1", "--ttl", "0x23b"), {"ttl": 571}),
    ((*CLAIM, "--target", "1", "--ttl", "0B1000111011"), {"ttl": 571}),
    ((*CLAIM, "--target", "1", "--ttl", "1_171"), {"ttl": 1171}),
    ((*CLAIM, "--target", "1", "--ttl", "+571"), {"ttl": 571}),
    ((*CLAIM, "--target", "1", "--ttl", "01073"), {"ttl": 571}),  # Ruby Integer(): octal
    ((*CLAIM, "--target", "1", "--ttl", "0_7"), {"ttl": 7}),
    ((*CLAIM, "--target", "1", "--ttl", "9" * 30), {"ttl": 2**53}),  # saturates
    ((*CLAIM, "--target", "1", "--generation", "-2"), {}),
])
def test_claim_argument_lists_agent_coord_takes(argv: tuple[str, ...], values: dict[str, Any]) -> None:
    parsed = parse("claim", *argv)
    assert {key: parsed[key] for key in values} == values
    if "--sy" in argv:
        assert parsed["meta"].synthetic is True
    if "--generation" in argv:
        assert parsed["meta"].generation == -2


@pytest.mark.parametrize(("label", "argv", "message"), [
    ("claim", (*CLAIM, "--target", "5", "--st", "x"), "ambiguous option: --st"),
    ("claim", ("-a", "agent-a"), "ambiguous option: -a"),
    ("claim", (*CLAIM, "-t", "5"), "ambiguous option: -t"),
    ("claim", (*CLAIM, "--target", "5", "--no-json"), "invalid option: --no-json"),
    ("claim", (*CLAIM, "--target", "1", "--no-such-flag"), "invalid option: --no-such-flag"),
    ("status", ("--js=1",), "needless argument: --js=1"),
    ("status", ("-j=1",), "needless argument: -j=1"),
    ("status", ("-jx",), "invalid option: -x"),
    ("claim", (*CLAIM, "--target"), "missing argument: --target"),
    ("claim", (*CLAIM, "--tar"), "missing argument: --tar"),
    ("claim", (*CLAIM, "extra", "--target", "5"), "unexpected arguments: extra"),
    ("claim", (*CLAIM, "--target", "5", "--", "extra", "more"), "unexpected arguments: extra more"),
    ("status", ("--de",), "--deep is only valid for doctor"),
    ("status", ("--bogus", "--deep"), "--deep is only valid for doctor"),  # looked for first
    ("claim", (*CLAIM, "--target", "1", "--ttl", "1.5"), "invalid argument: --ttl 1.5"),
    ("claim", (*CLAIM, "--target", "1", "--ttl", ""), "invalid argument: --ttl "),
    ("claim", (*CLAIM, "--target", "1", "--ttl", " 60"), "invalid argument: --ttl  60"),
    ("claim", (*CLAIM, "--target", "1", "--ttl", "0o17"), "invalid argument: --ttl 0o17"),
    ("claim", (*CLAIM, "--target", "1", "--ttl", "09"), "invalid argument: --ttl 09"),
    ("claim", (*CLAIM, "--target", "1", "--ttl", "0_8"), "invalid argument: --ttl 0_8"),
    ("claim", (*CLAIM, "--target", "1", "--tt=abc"), "invalid argument: --tt=abc"),
    ("claim", (*CLAIM, "--target", "1", "--ttl", "abc", "--ttl", "5"), "invalid argument: --ttl abc"),
    ("claim", (*CLAIM, "--target", "1", "--generation", ""), "invalid argument: --generation "),
    ("claim", (*CLAIM, "--target", "1", "--synthetic=yes"), "needless argument: --synthetic=yes"),
    ("heartbeat", ("--agent-id", "a", "--ttl", "1e3"), "invalid argument: --ttl 1e3"),
    ("version", ("--ttl", "abc"), "invalid argument: --ttl abc"),
    ("gc", ("--dry-run", "--hot-days", "1.5"), "invalid argument: --hot-days 1.5"),
    ("claim", ("--agent-id", "a", "--repo", "acme/w"), "missing required --target"),
    ("claim", ("--agent-id", "", "--repo", "acme/w", "--target", "1"), "missing required --agent-id"),
    ("claim", (*CLAIM, "--target", "1", "--terminal", "done"), "--terminal is only valid with terminal closeout"),
    ("heartbeat", ("--agent-id", "a", "--workspace", "ws"), "--workspace is only valid with terminal closeout"),
    ("status", ("--json", "--pr-state", "merged"), "--pr-state is only valid with terminal closeout"),
    ("record-event", ("--batch-id", "b1", "--type", "note", "--evidence-url", "u"),
     "terminal-only options require --type lane_closed"),
    ("release", (*CLAIM, "--target", "1", "--pr-state", "merged"), "--pr-state requires --terminal"),
    ("version", ("--terminal", "done"), "--terminal is only valid with terminal closeout"),
    ("claim", (*CLAIM, "--target", "1", "--launch-prompt", "x"), "--launch-prompt is only valid for register-batch"),
    ("heartbeat", ("--agent-id", "a", "--handoff-note", "x"), "invalid option: --handoff-note"),
    ("claim", (*CLAIM, "--target", "1", "--dry-run"), "invalid option: --dry-run"),
    ("status", ("--stack-json",), "invalid option: --stack-json"),
    ("gc", ("--dry-run", "--include-archived"), "invalid option: --include-archived"),
])
def test_refusals_in_agent_coord_words(label: str, argv: tuple[str, ...], message: str) -> None:
    said = refusal(label, *argv)
    # agent-coord's words, then (for an unknown option near a real one) our one-line hint.
    assert said == message or (said.startswith(f"{message}; did you mean --") and said.endswith("?"))


@pytest.mark.parametrize(("label", "argv", "message"), [
    ("claim", ("--agnet-id", "a"), "invalid option: --agnet-id; did you mean --agent-id?"),
    ("status", ("--jsn",), "invalid option: --jsn; did you mean --json?"),
    ("heartbeat", ("--Stauts", "x"), "invalid option: --Stauts; did you mean --status?"),
    ("claim", ("--zzzzzz",), "invalid option: --zzzzzz"),  # nothing near: no guess
])
def test_an_unknown_option_near_a_real_one_gets_a_did_you_mean(label: str, argv: tuple[str, ...],
                                                               message: str) -> None:
    assert refusal(label, *argv) == message


def test_agent_coord_global_options_are_taken_and_ignored() -> None:
    assert parse("version", "--json", "--agent-id", "x", "--ttl", "5", "--batch-id", "b",
                 "--synthetic") == {"json": True}
    assert parse("config", "show", "--json", "--repo", "acme/widgets")["action"] == "show"


@pytest.mark.parametrize("argv", [("--help",), ("-h",), ("--agent-id", "x", "--help"), ("--he",),
                                  ("-hx",)])
def test_help_anywhere(argv: tuple[str, ...]) -> None:
    with pytest.raises(spec.HelpRequested):
        spec.parse(BY_LABEL["gc"], list(argv), (TIMEOUT,))


def test_an_earlier_error_wins_over_a_later_help() -> None:
    assert refusal("claim", "--bogus", "--help") == "invalid option: --bogus"


def test_a_value_is_the_next_word_whatever_it_looks_like() -> None:
    assert parse("heartbeat", "--agent-id", "a", "--status=--json")["status"] == "--json"
    assert parse("heartbeat", "--agent-id", "a", "--status", "--help")["status"] == "--help"


def test_the_global_timeout_after_the_command() -> None:
    values, extra = spec.parse(BY_LABEL["status"], ["--json", "--timeout", "5"], (TIMEOUT,))
    assert extra == {"timeout": 5.0} and values["json"] is True
    values, extra = spec.parse(BY_LABEL["wait"], ["--until-free", "--repo", "acme/w", "--target", "1",
                                                  "--timeout", "5"], (TIMEOUT,))
    assert extra == {} and values["timeout"] == 5.0  # wait's own --timeout


# ---- generated argument lists ------------------------------------------------------------


def _value(opt: spec.Opt) -> st.SearchStrategy[str]:
    good = {"int": st.integers(1, 70_000).map(str), "custom": st.sampled_from(["1", "0.5", "2", "30"])}
    return good.get(opt.kind, st.text(alphabet="abc/:.#", min_size=1, max_size=6))


def _abbreviations(command: spec.Command, opt: spec.Opt) -> list[str]:
    """Every prefix of the option's name that the command resolves to this option."""
    table = command.universe((TIMEOUT,))
    return [opt.name[:n] for n in range(3, len(opt.name) + 1)
            if spec.resolve(table, opt.name[2:n], icase=True) is opt]


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.label)
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_spelling_of_an_option_means_the_option(command: spec.Command, data: Any) -> None:
    """Abbreviated, `=`-joined or spelled out: the same values (or the same refusal)."""
    full: list[str] = []
    other: list[str] = []
    for opt in data.draw(st.lists(st.sampled_from(command.options()), max_size=5)) if command.options() else []:
        spelling = data.draw(st.sampled_from(_abbreviations(command, opt)))
        if opt.kind == "flag":
            full.append(opt.name)
            other.append(spelling)
            continue
        value = data.draw(_value(opt))
        full += [opt.name, value]
        other += [f"{spelling}={value}"] if data.draw(st.booleans()) else [spelling, value]

    def outcome(argv: list[str]) -> Any:
        try:
            return spec.parse(command, argv, (TIMEOUT,))
        except spec.UsageProblem as problem:
            return problem.message.split(":")[0]
        except spec.HelpRequested:
            return "help"
        except spec.Exit as refused:  # a group's own check (`--renew-every needs --keep-alive`)
            return ("exit", refused.code)

    assert outcome(full) == outcome(other), (full, other)


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.label)
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=st.lists(st.one_of(
    st.sampled_from(["--", "-", "-h", "-j", "-x", "--st", "--ttl", "--json=1", "--a", "stray", "",
                     "--=x", "---", "-=", "--ttl=", "--generation", "-1", "--target", "\x00"]),
    st.text(max_size=8)), max_size=8))
def test_every_refusal_is_one_line_in_agent_coord_words(command: spec.Command, argv: list[str]) -> None:
    try:
        spec.parse(command, argv, (TIMEOUT,))
    except spec.HelpRequested:
        return
    except spec.UsageProblem as problem:
        assert problem.message.startswith(REFUSALS) or "only valid with terminal closeout" in \
            problem.message or "requires --terminal" in problem.message, problem.message
    except spec.Exit:
        return  # a command-level check already reported and exited
