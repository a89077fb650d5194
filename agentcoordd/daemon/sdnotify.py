"""systemd integration without a dependency: sd_notify datagrams and socket activation."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

SD_LISTEN_FDS_START = 3


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send READY=1 / STATUS=… / WATCHDOG=1 / STOPPING=1 to $NOTIFY_SOCKET.

    Returns False (and does nothing) when not started by systemd. A notify
    failure never takes the daemon down.
    """
    address = (env if env is not None else os.environ).get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8", "replace"))
        return True
    except OSError:
        return False


def listen_fds(env: Mapping[str, str] | None = None) -> list[int]:
    """File descriptors systemd passed us (LISTEN_FDS for our own LISTEN_PID)."""
    source = env if env is not None else os.environ
    try:
        pid = int(source.get("LISTEN_PID", ""))
        count = int(source.get("LISTEN_FDS", ""))
    except ValueError:
        return []
    if pid != os.getpid() or count <= 0:
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), when enabled."""
    source = env if env is not None else os.environ
    try:
        usec = int(source.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = source.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    return usec / 2_000_000 if usec > 0 else None
