"""dashboard: the daemon's read-only web dashboard on 127.0.0.1; prints its URL."""

from __future__ import annotations

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, JSON, send, show
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


def open_browser(url: str) -> bool:
    """The user's browser ($BROWSER honoured); False when none could be started."""
    import webbrowser

    try:
        return webbrowser.open(url, new=2)
    except webbrowser.Error:
        return False


def dashboard(*, port: int | None, open_: bool, json: bool, selection: p.Selection) -> None:
    response = send(p.Dashboard(port=port, selection=selection))
    url = response.payload.get("url") if isinstance(response.payload, dict) else None
    if open_ and response.exit_code == 0 and url and not open_browser(url):
        response.warnings.append(f"could not open a browser; open {url} yourself")
    show(response, as_json=json, text=lambda payload: payload.get("url"))


COMMANDS = (spec.Command(
    ("dashboard",), "Start (once per daemon) the read-only dashboard on 127.0.0.1 and print its URL.",
    (Opt("--port", "port", "int", minimum=0, maximum=65535, metavar="N",
         help="Listen on this loopback port (default: a free one; only when first started)."),
     Opt("--open", "open_", "flag", help="Open the URL in a browser."), JSON, BACKEND),
    dashboard),)
