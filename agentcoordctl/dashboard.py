"""dashboard: the daemon's read-only web dashboard on 127.0.0.1; prints its URL."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from agentcoordctl.options import (
    ApiUrl, EtcdEndpoints, Json, LegacyBackend, StateRoot, send, selection, show,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)


def open_browser(url: str) -> bool:
    """The user's browser ($BROWSER honoured); False when none could be started."""
    import webbrowser

    try:
        return webbrowser.open(url, new=2)
    except webbrowser.Error:
        return False


def dashboard(
    port: Annotated[Optional[int], typer.Option(
        "--port", metavar="N", min=0, max=65535,
        help="Listen on this loopback port (default: a free one; only when first started).")] = None,
    open_: Annotated[bool, typer.Option("--open", help="Open the URL in a browser.")] = False,
    json: Json = False,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Start (once per daemon) the read-only dashboard on 127.0.0.1 and print its URL."""
    response = send(p.Dashboard(port=port,
                                selection=selection(state_root, api_url, etcd_endpoints, backend)))
    url = response.payload.get("url") if isinstance(response.payload, dict) else None
    if open_ and response.exit_code == 0 and url and not open_browser(url):
        response.warnings.append(f"could not open a browser; open {url} yourself")
    show(response, as_json=json, text=lambda payload: payload.get("url"))
