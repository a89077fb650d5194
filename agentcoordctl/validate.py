"""`validate --family NAME (FILE|-) [--json]` and `validate --list`.

Checks a record against a published contract (contracts/, schema/state/v1/)
before anyone writes it: exit 0 valid, 1 invalid (each violation with its
JSON path), 1 for a usage error or input that is not JSON, 2 when the file
cannot be read. Runs client-side — no daemon, no backend: the validators are
the daemon's own (`agentcoordd.model.validation`), imported inside the command
so other commands never pay for them.
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.batches import read_input
from agentcoordctl.options import JSON, dump_json, fail
from agentcoordctl.spec import Arg, Exit, Opt
from agentcoordd import protocol as p
from agentcoordd.model import ids

RECORD_CAP = 1024 * 1024  # 1 MiB: larger than any record a backend stores


def validate(*, file: str | None, family: str | None, list_families: bool, json: bool) -> None:
    from agentcoordd.model import validation as v

    if list_families:
        if file is not None or family is not None:
            raise fail("validate --list takes no FILE or --family", p.EXIT_USAGE)
        summaries = v.describe()
        if json:
            print(dump_json({"families": [{"name": k, "description": d} for k, d in summaries.items()]}))
        else:
            width = max(map(len, summaries))
            print("\n".join(f"{name.ljust(width)}  {text}" for name, text in summaries.items()))
        raise Exit(0)
    if family is None or file is None:
        raise fail("validate needs --family NAME and FILE (or -); `validate --list` names the families",
                   p.EXIT_USAGE)
    if family not in v.families():
        raise fail(f"unknown record family: {_shown(family)} (known: {', '.join(v.families())})",
                   p.EXIT_USAGE)
    raw = read_input(file, "record", RECORD_CAP)
    data = _decode(raw, file)
    try:
        payload = v.validation_payload(family, data)
    except RecursionError:
        raise fail(f"record {file}: nesting too deep to validate", p.EXIT_USAGE) from None
    payload = {**payload, "source": file}
    if json:
        print(dump_json(payload))
    else:
        print(render(payload))
    raise Exit(0 if payload["valid"] else p.EXIT_USAGE)


def _decode(raw: bytes, file: str) -> Any:
    import msgspec

    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise fail(f"record {file} is not JSON: {' '.join(str(exc).split())}", p.EXIT_USAGE) from None
    except RecursionError:
        raise fail(f"record {file} is not JSON we accept: nesting too deep", p.EXIT_USAGE) from None


def _shown(text: str) -> str:
    return ids.shown(text, 60)


def render(payload: dict[str, Any]) -> str:
    family, source = payload["family"], payload.get("source")
    if payload["valid"]:
        return f"valid: {source} is a valid {family} record"
    from agentcoordd.model.validation import Violation, one_line

    lines = [one_line(Violation(row["path"], row["message"])) for row in payload["violations"]]
    count = len(lines)
    lines.append(f"invalid: {source} is not a valid {family} record "
                 f"({count} violation{'s' if count != 1 else ''})")
    return "\n".join(lines)


COMMANDS = (spec.Command(
    ("validate",), "Check a record against its published contract: exit 0 valid, 1 invalid.",
    (Arg("file", "FILE|-", "The record (JSON) to check; - for stdin.", default=None),
     Opt("--family", "family", metavar="NAME", help="Record family (see --list)."),
     Opt("--list", "list_families", "flag", help="Name the record families."),
     JSON),
    validate),)
