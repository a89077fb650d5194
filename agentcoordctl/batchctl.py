"""batch stop | stopped: the batch stop signals (events only; nothing is killed)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from agentcoordctl.options import ApiUrl, EtcdEndpoints, Json, LegacyBackend, StateRoot, run, selection
from agentcoordd import protocol as p

BatchIdRequired = Annotated[str, typer.Option("--batch-id", metavar="ID", help="Batch id.")]
Message = Annotated[Optional[str], typer.Option(
    "--message", metavar="TEXT", help="Why (shown to the batch's agents and on the dashboard).")]


def register(app: typer.Typer) -> None:
    batch = typer.Typer(name="batch", no_args_is_help=True, rich_markup_mode=None,
                        help="Batch control signals (stop requests).")
    batch.command("stop")(stop)
    batch.command("stopped")(stopped)
    app.add_typer(batch, name="batch")


def _text(payload: dict[str, Any]) -> str:
    event = payload.get("event") or {}
    return f"recorded {event.get('type')} for batch {payload.get('batch_id')} ({event.get('event_id')})"


def stop(
    batch_id: BatchIdRequired, message: Message = None, json: Json = False,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Request a batch stop: append batch.stop_requested.

    An audit/control signal only: it kills nothing, releases no claim and edits
    no heartbeat. Every later ctl call for a lane of the batch prints a notice
    and carries stop_requested: true; agents finish their safe checkpoint and stop.
    """
    run(p.BatchStop(batch_id=batch_id, message=message,
                    selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=_text)


def stopped(
    batch_id: BatchIdRequired, message: Message = None, json: Json = False,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Record that a batch has stopped: append batch.stopped (nothing else)."""
    run(p.BatchStopped(batch_id=batch_id, message=message,
                       selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=_text)
