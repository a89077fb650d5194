"""dashboard: the daemon's read-only web dashboard on 127.0.0.1; prints the URL that
signs this user in (it carries the token only the daemon's user can read)."""

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
    url = response.payload.get("login_url") if isinstance(response.payload, dict) else None
    if open_ and response.exit_code == 0 and url and not open_browser(url):
        response.warnings.append(f"could not open a browser; open {url} yourself")
    show(response, as_json=json, text=lambda payload: payload.get("login_url"))


COMMANDS = (spec.Command(
    ("dashboard",), "Start (once per daemon) the read-only dashboard on 127.0.0.1 and print the "
    "URL that signs you in.",
    (Opt("--port", "port", "int", minimum=0, maximum=65535, metavar="N",
         help="Listen on this loopback port (default: a free one; only when first started)."),
     Opt("--open", "open_", "flag", help="Open the URL in a browser."), JSON, BACKEND),
    dashboard),)
