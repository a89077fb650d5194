"""register-batch and batch-audit."""

from __future__ import annotations

import os
import sys

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import render, spec
from agentcoordctl.options import BACKEND, BATCH_ID_REQUIRED, JSON, fail, run
from agentcoordctl.spec import REQUIRED, Opt
from agentcoordd import protocol as p


def read_input(path: str, what: str, cap: int) -> bytes:
    """Read PATH (or - for stdin) with a size cap: too big exit 1, unreadable exit 2
    (`<what> unreadable: ...`, agent-coord's words)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(cap + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(cap + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise fail(f"{what} unreadable: {reason} - {path}", p.EXIT_OPERATIONAL) from None
    if len(data) > cap:
        raise fail(f"{what} {path} is larger than {cap} bytes", p.EXIT_USAGE)
    return data


def register_batch(*, file: str, batch_id: str | None, launch_prompt: str | None, synthetic: bool,
                   synthetic_kind: str | None, selection: p.Selection) -> None:
    if file == "-" and launch_prompt == "-":
        raise fail("--file - and --launch-prompt - cannot both read stdin", p.EXIT_USAGE)
    manifest = read_input(file, "batch manifest", p.MANIFEST_CAP)
    prompt = None
    if launch_prompt is not None:
        raw = read_input(launch_prompt, "launch prompt", p.LAUNCH_PROMPT_CAP)
        try:
            prompt = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail("launch prompt must be valid UTF-8", p.EXIT_USAGE) from None
    source = file if file == "-" else os.path.abspath(file)
    run(p.RegisterBatch(manifest=manifest, batch_id=batch_id, launch_prompt=prompt, synthetic=synthetic,
                        synthetic_kind=synthetic_kind, source=source, selection=selection),
        text=render.register_batch)


def batch_audit(*, batch_id: str, include_archived: bool, json: bool, selection: p.Selection) -> None:
    run(p.BatchAudit(batch_id=batch_id, include_archived=include_archived, selection=selection),
        as_json=json, text=render.batch_audit)


COMMANDS = (
    spec.Command(
        ("register-batch",), "Validate and write a batch manifest to batches/<batch-id>.json.",
        (Opt("--file", "file", default=REQUIRED, metavar="PATH",
             help="Batch manifest JSON (- for stdin)."),
         Opt("--batch-id", "batch_id", metavar="ID",
             help="The batch, when the manifest does not name it (must match when it does)."),
         Opt("--launch-prompt", "launch_prompt", metavar="PATH|-",
             help="Attach the exact coordination prompt from PATH (- for stdin)."),
         Opt("--synthetic", "synthetic", "flag", help="Batch-level synthetic provenance."),
         Opt("--synthetic-kind", "synthetic_kind", metavar="KIND", help="simulation, smoke, …"),
         BACKEND),
        register_batch, **AGENT_COORD),
    spec.Command(
        ("batch-audit",), "Telemetry-completeness gate: exit 0 complete, 1 incomplete, 2 unknown.",
        (BATCH_ID_REQUIRED,
         Opt("--include-archived", "include_archived", "flag",
             help="Audit a batch gc archived from archive/ (its manifest and compacted events)."),
         JSON, BACKEND), batch_audit, **AGENT_COORD),
)
