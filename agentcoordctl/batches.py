"""register-batch and batch-audit."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from agentcoordctl import render
from agentcoordctl.options import (
    ApiUrl, EtcdEndpoints, Json, LegacyBackend, StateRoot, SyntheticKind, fail, run, selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("register-batch")(register_batch)
    app.command("batch-audit")(batch_audit)


def read_input(path: str, what: str, cap: int) -> bytes:
    """Read PATH (or - for stdin) with a size cap: too big exit 1, unreadable exit 2."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(cap + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(cap + 1)
    except FileNotFoundError:
        raise fail(f"cannot read {what} {path}: no such file", p.EXIT_OPERATIONAL) from None
    except IsADirectoryError:
        raise fail(f"cannot read {what} {path}: is a directory", p.EXIT_OPERATIONAL) from None
    except OSError as exc:
        raise fail(f"cannot read {what} {path}: {exc.strerror or exc}", p.EXIT_OPERATIONAL) from None
    if len(data) > cap:
        raise fail(f"{what} {path} is larger than {cap} bytes", p.EXIT_USAGE)
    return data


def register_batch(
    file: Annotated[str, typer.Option("--file", metavar="PATH", help="Batch manifest JSON (- for stdin).")],
    launch_prompt: Annotated[Optional[str], typer.Option(
        "--launch-prompt", metavar="PATH|-",
        help="Attach the exact coordination prompt from PATH (- for stdin).")] = None,
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Batch-level synthetic provenance.")] = False,
    synthetic_kind: SyntheticKind = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Validate and write a batch manifest to batches/<batch-id>.json."""
    if file == "-" and launch_prompt == "-":
        raise fail("--file - and --launch-prompt - cannot both read stdin", p.EXIT_USAGE)
    manifest = read_input(file, "manifest", p.MANIFEST_CAP)
    prompt = None
    if launch_prompt is not None:
        raw = read_input(launch_prompt, "launch prompt", p.LAUNCH_PROMPT_CAP)
        try:
            prompt = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(f"launch prompt {launch_prompt} is not valid UTF-8", p.EXIT_USAGE) from None
    source = file if file == "-" else os.path.abspath(file)
    run(p.RegisterBatch(manifest=manifest, launch_prompt=prompt, synthetic=synthetic,
                        synthetic_kind=synthetic_kind, source=source,
                        selection=selection(state_root, api_url, etcd_endpoints, backend)),
        text=render.register_batch)


def batch_audit(
    batch_id: Annotated[str, typer.Option("--batch-id", metavar="ID", help="Batch id.")],
    json: Json = False,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Telemetry-completeness gate: exit 0 complete, 1 incomplete, 2 unknown."""
    run(p.BatchAudit(batch_id=batch_id,
                     selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.batch_audit)
