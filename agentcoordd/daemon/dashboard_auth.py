"""Who may use the loopback HTTP port: the daemon's own user, holding its token.

Two checks, both on every connection of the dashboard server (docs/dashboard.md,
"Who can use it"):

* **The peer's uid** (Linux). A loopback TCP connection carries no credentials,
  but the kernel's socket table does: the client's end of the connection is the
  socket whose own address is the peer's and whose remote address is ours, and
  the table names the uid that owns it. It is asked for that one socket over
  netlink (sock_diag, what `ss` uses: ~10 µs), else found in `/proc/net/tcp`
  (or `tcp6`; ~1 ms with a thousand sockets). A connection whose client socket
  is not the daemon's user's (or cannot be found) is refused before anything is
  read. Where there is no such table (macOS), the token alone decides.
* **The token**: a per-user secret in a 0600 file beside the daemon's socket
  (`<socket>.dashboard-token`, in the socket's 0700 directory). `agentcoordctl
  dashboard` prints a login URL carrying it; `GET /login?token=…` turns it into
  a cookie (HttpOnly, SameSite=Strict) and redirects to the page. Scripts and
  Prometheus send `Authorization: Bearer <token>` (its `credentials_file`).
  The file survives restarts, so a browser's cookie and a scraper's
  configuration keep working.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
import socket
import stat
import struct
from pathlib import Path

from agentcoordd.store.files import replace_private

TOKEN_SUFFIX = ".dashboard-token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
_TABLES = {4: "/proc/net/tcp", 6: "/proc/net/tcp6"}


def token_path(socket_path: str | os.PathLike[str]) -> Path:
    """Where the daemon serving `socket_path` keeps its dashboard token."""
    return Path(f"{os.fspath(socket_path)}{TOKEN_SUFFIX}")


def load_or_create_token(path: Path) -> str:
    """The token in `path`; a new one when the file is missing, not ours, not
    private (0600) or not a token. Raises OSError when it cannot be written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    except OSError:  # a symlink (ELOOP) or unreadable: replaced below
        fd = None
    if fd is not None:
        try:
            info = os.fstat(fd)
            text = os.read(fd, 128).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        if (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
                and info.st_mode & 0o077 == 0 and _TOKEN.fullmatch(text)):
            return text
    token = secrets.token_urlsafe(32)
    replace_private(path, f"{token}\n".encode("ascii"))
    return token


def token_matches(offered: str | None, token: str) -> bool:
    return bool(offered) and hmac.compare_digest(offered.encode("utf-8", "replace"), token.encode())


# ---- the peer's uid from the kernel's socket table ------------------------------

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NO_COOKIE = 0xFFFFFFFF


def socket_table_available() -> bool:
    return os.path.exists(_TABLES[4])


def peer_uid(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The uid owning the client end of the loopback connection local<-remote
    (None: no such socket, or no socket table)."""
    try:
        return _diag_uid(remote, local)
    except OSError:  # no netlink here (a sandbox, say): the /proc table
        return _table_uid(remote, local)


def _packed(host: str) -> bytes | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).packed
    except ValueError:
        return None


def _diag_uid(own: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """sock_diag's exact lookup of the TCP socket whose address is `own` and whose
    peer is `peer` (struct inet_diag_req_v2 in, struct inet_diag_msg out)."""
    src, dst = _packed(own[0]), _packed(peer[0])
    if src is None or dst is None or len(src) != len(dst):
        return None
    family = socket.AF_INET if len(src) == 4 else socket.AF_INET6
    sockid = (struct.pack(">HH", own[1], peer[1]) + src.ljust(16, b"\0") + dst.ljust(16, b"\0")
              + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))
    request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
    message = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(1.0)
        link.sendto(message + request, (0, 0))
        answer = link.recv(65536)
    if len(answer) < 16 + 72 or struct.unpack_from("=H", answer, 4)[0] != _SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR: no such socket
    return int(struct.unpack_from("=I", answer, 16 + 64)[0])  # inet_diag_msg.idiag_uid


def _hex_endpoint(host: str, port: int) -> tuple[int, bytes] | None:
    """(IP version, the `ADDR:PORT` column /proc/net/tcp* shows for it)."""
    raw = _packed(host)
    if raw is None:
        return None
    # Each 32-bit word is printed in host (little-endian on every Linux we run on) order.
    words = b"".join(b"%08X" % int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4))
    return (4 if len(raw) == 4 else 6), words + b":%04X" % port


def _table_uid(own: tuple[str, int], peer: tuple[str, int]) -> int | None:
    mine, theirs = _hex_endpoint(*own[:2]), _hex_endpoint(*peer[:2])
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return None
    try:
        table = open(_TABLES[mine[0]], "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with table:
        next(table, None)  # the header
        for line in table:
            fields = line.split()
            # sl local_address rem_address st tx:rx tr:tm retrnsmt uid …
            if len(fields) > 7 and fields[1] == mine[1] and fields[2] == theirs[1]:
                return int(fields[7])
    return None
