"""daemon status | stop."""

from __future__ import annotations

import os
import time

from agentcoordctl import client, render, spec
from agentcoordctl.options import JSON, dump_json, fail, send, show
from agentcoordctl.spec import Arg, Exit
from agentcoordd import protocol as p

STOP_WAIT = 10.0


def daemon(*, action: str, json: bool) -> None:
    path = client.socket_path()
    if action not in ("status", "stop"):
        raise fail(f"unknown daemon action: {action} (expected: status or stop)", p.EXIT_USAGE)
    if not client.daemon_running(path):
        if action == "stop":
            print(f"agentcoordd is not running (socket {path})")
            raise Exit(0)
        if json:
            print(dump_json({"running": False, "socket": path}))
        else:
            print(f"agentcoordd is not running (socket {path})")
        raise Exit(p.EXIT_OPERATIONAL)
    if action == "status":
        response = send(p.DaemonStatus(), autostart=False, path=path)
        if isinstance(response.payload, dict):
            response.payload = {"running": True, **response.payload}
        show(response, as_json=json, text=render.daemon_status)
    response = send(p.DaemonStop(), autostart=False, path=path)
    if response.exit_code != 0:
        show(response)
    pid = (response.payload or {}).get("pid")
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline:
        if not os.path.exists(path) and not _alive(pid):
            break
        time.sleep(0.02)
    else:
        raise fail(f"agentcoordd (pid {pid}) did not stop within {STOP_WAIT:g}s", p.EXIT_OPERATIONAL)
    print(f"agentcoordd stopped (pid {pid})")
    raise Exit(0)


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child nobody reaped yet still "exists": it is not running
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


COMMANDS = (spec.Command(
    ("daemon",), "Is agentcoordd running (status), or stop it gracefully (stop). Never starts one.",
    (Arg("action", "status|stop", "status or stop."), JSON), daemon),)
