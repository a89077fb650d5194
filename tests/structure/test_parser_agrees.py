"""The fast parser and the typer app come from one declaration; generated
argument lists (valid and not) are accepted or refused by both alike, with
the same values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordctl import cli, spec, typer_app
from agentcoordctl.options import TIMEOUT

DECLARED = cli.declarations()


def typer_parse(command: spec.Command, argv: list[str]) -> dict[str, Any] | None:
    """What typer hands the command for `argv`, or None when it refuses it."""
    captured: dict[str, Any] = {}
    probe = dataclasses.replace(command, run=lambda **values: captured.update(values))
    app = typer_app.build([probe], TIMEOUT, lambda _value: None)
    try:
        typer.main.get_command(app).main([*command.path, *argv], prog_name="agentcoordctl",
                                         standalone_mode=False)
    except typer.TyperException:
        return None
    return captured


def fast_parse(command: spec.Command, argv: list[str]) -> dict[str, Any] | None:
    try:
        return spec.parse(command, argv)
    except spec.UsageProblem:
        return None


def _value(opt: spec.Opt) -> st.SearchStrategy[str]:
    good = {"int": st.integers(-5, 70_000).map(str), "custom": st.sampled_from(["0", "0.5", "2", "30"])}
    hostile = st.sampled_from(["", "x", "-1", "nan", "1e9", "--json", "1_0", " 3", "-"])
    return st.one_of(good.get(opt.kind, st.text(alphabet="abc-/:.#", min_size=0, max_size=6)), hostile)


@st.composite
def argument_lists(draw: st.DrawFn, command: spec.Command) -> list[str]:
    argv: list[str] = []
    options = command.options()
    for opt in draw(st.lists(st.sampled_from(options), max_size=6)) if options else []:
        if opt.kind == "flag":
            argv.append(opt.name if draw(st.integers(0, 9)) else f"{opt.name}=1")
            continue
        value = draw(_value(opt))
        if draw(st.booleans()):
            argv.append(f"{opt.name}={value}")
        elif draw(st.integers(0, 19)):
            argv += [opt.name, value]
        else:
            argv.append(opt.name)  # a missing value, unless another word follows
    for _ in range(draw(st.integers(0, 2))):
        argv.insert(draw(st.integers(0, len(argv))),
                    draw(st.sampled_from(["stray", "--no-such", "--", "stop", "show", "-x"])))
    return argv


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: " ".join(c.path))
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fast_and_typer_parsers_agree(command: spec.Command, data: Any) -> None:
    argv = data.draw(argument_lists(command))
    assert fast_parse(command, argv) == typer_parse(command, argv), argv
