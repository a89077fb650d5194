"""The loopback port's two checks on their own: the token file, and the uid the
kernel names for a real connection's client socket (netlink and /proc)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentcoordd.daemon import dashboard_auth


def test_the_token_file_is_made_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.sock.dashboard-token"
    token = dashboard_auth.load_or_create_token(path)
    assert path.stat().st_mode & 0o777 == 0o600 and len(token) == 43
    assert dashboard_auth.load_or_create_token(path) == token


@pytest.mark.parametrize("spoil", ["loose-mode", "not-a-token", "symlink"])
def test_a_token_file_that_is_not_private_or_not_a_token_is_replaced(tmp_path: Path, spoil: str) -> None:
    path = tmp_path / "d.sock.dashboard-token"
    if spoil == "symlink":
        (tmp_path / "elsewhere").write_text("A" * 43 + "\n")
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_text(("A" * 43 if spoil == "loose-mode" else "short") + "\n")
        path.chmod(0o644 if spoil == "loose-mode" else 0o600)
    token = dashboard_auth.load_or_create_token(path)
    assert token != "A" * 43 and not path.is_symlink()
    assert path.stat().st_mode & 0o777 == 0o600
    if spoil == "symlink":  # replaced, not written through
        assert (tmp_path / "elsewhere").read_text().strip() == "A" * 43


def _connection_from(prefix: list[str]) -> tuple[socket.socket, socket.socket, subprocess.Popen]:
    """A server socket accepted from a client process started with `prefix`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = subprocess.Popen(
        [*prefix, sys.executable, "-c",
         "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); "
         "sys.stdin.read()", str(listener.getsockname()[1])], stdin=subprocess.PIPE)
    accepted, _ = listener.accept()
    return listener, accepted, client


@pytest.mark.parametrize("lookup", ["netlink", "proc"])
def test_the_kernel_names_the_uid_of_the_client_socket(other_user: list[str], lookup: str) -> None:
    for prefix, uid in (([], os.getuid()), (other_user, int(other_user[2]))):
        listener, accepted, client = _connection_from(prefix)
        try:
            local, remote = accepted.getsockname(), accepted.getpeername()
            found = (dashboard_auth.peer_uid(local, remote) if lookup == "netlink"
                     else dashboard_auth._table_uid(remote, local))
            assert found == uid
        finally:
            client.communicate(b"")
            accepted.close()
            listener.close()


def test_an_unknown_connection_has_no_uid() -> None:
    assert dashboard_auth.peer_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None
    assert dashboard_auth._table_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None
