"""The help app (typer) and the parser agentcoordctl runs (spec.parse) come from one
declaration per command, so they cannot drift: generated canonical argument lists
(`--name value`, plain decimal integers, every flag) parse to the same values in
both, and an undeclared option is refused by both. Only the parser runs a call;
its agent-coord extensions (abbreviations, Ruby integers, -x) are tested in
test_option_parser.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordctl import cli, spec, typer_app
from agentcoordctl.options import TIMEOUT

# agent-coord's cross-option rules (checks, screens) belong to the parser only; they
# are tested with it. Commands with positional arguments have their own tests.
DECLARED = [msgspec.structs.replace(c, checks=(), screen=None)
            for c in cli.declarations() if not c.arguments()]


def typer_parse(command: spec.Command, argv: list[str]) -> dict[str, Any] | None:
    """What typer hands the command for `argv`, or None when it refuses it."""
    captured: dict[str, Any] = {}
    probe = msgspec.structs.replace(command, run=lambda **values: captured.update(values))
    app = typer_app.build([probe], TIMEOUT, lambda _value: None)
    try:
        typer.main.get_command(app).main([*command.path, *argv], prog_name="agentcoordctl",
                                         standalone_mode=False)
    except (typer.Exit, typer.Abort, spec.Exit, spec.UsageProblem):  # a group's own rule
        return None
    except Exception as exc:  # click's UsageError and friends
        if type(exc).__module__.startswith(("click", "typer")):
            return None
        raise
    return captured


def fast_parse(command: spec.Command, argv: list[str]) -> dict[str, Any] | None:
    try:
        return spec.parse(command, argv)[0]
    except (spec.UsageProblem, spec.Exit):
        return None


def _value(opt: spec.Opt) -> st.SearchStrategy[str]:
    if opt.kind == "int":
        low = 1 if opt.minimum is None else max(opt.minimum, 1)
        return st.integers(low, 70_000).map(str)
    if opt.kind == "custom":
        return st.sampled_from(["1", "2", "30"])
    return st.text(alphabet="abcxyz0123456789/:._", min_size=1, max_size=8)


@st.composite
def canonical_lists(draw: st.DrawFn, command: spec.Command) -> list[str]:
    argv: list[str] = []
    options = [o for o in command.options() if o.kind != "many"]
    for opt in draw(st.lists(st.sampled_from(options), max_size=6, unique=True)) if options else []:
        argv += [opt.name] if opt.kind == "flag" else [opt.name, draw(_value(opt))]
    return argv


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: " ".join(c.path))
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_help_app_and_parser_read_canonical_arguments_alike(command: spec.Command, data: Any) -> None:
    argv = data.draw(canonical_lists(command))
    ours, theirs = fast_parse(command, argv), typer_parse(command, argv)
    if ours is not None and theirs is not None:
        assert {k: v for k, v in ours.items() if v is not None} == \
            {k: v for k, v in theirs.items() if v is not None}, argv
    else:  # a missing required option: both refuse
        assert ours is None and theirs is None, (argv, ours, theirs)


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: " ".join(c.path))
def test_an_undeclared_option_is_refused_by_both(command: spec.Command) -> None:
    assert fast_parse(command, ["--no-such-option", "1"]) is None
    assert typer_parse(command, ["--no-such-option", "1"]) is None
