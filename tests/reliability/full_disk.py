"""Small filesystems that fill up (issue 41, finding 2), shared by tests/reliability
(CI sizes) and bench/reliability.py: a tmpfs of its own (we run as root), filled
with one file until the kernel says ENOSPC and freed by removing it; and a
directory made read-only under a running daemon (EROFS). Never skipped: a
machine where mount is refused fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from integration.helpers import Daemon, make_daemon

from .scenarios import wait_until


class SmallFs:
    """A mounted tmpfs of `size` bytes at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / ".filler"

    def fill(self) -> None:
        """Take every free byte (the page cache of a tmpfs is its disk)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            for size in (65536, 512, 1):  # down to the last byte a short write takes
                while True:
                    try:
                        os.write(fd, b"\0" * size)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)



@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` read-only for every new open by path (EROFS), however many files are
    open for writing under it: a read-only bind mount of the directory onto itself
    (a remount of the filesystem itself would be refused while the daemon holds its
    lock files open)."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, capture_output=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True)


@contextlib.contextmanager
def small_fs(size: str = "1m") -> Iterator[SmallFs]:
    path = Path(tempfile.mkdtemp(prefix="acfs.", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield SmallFs(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
        with contextlib.suppress(OSError):
            path.rmdir()


def daemon_on(base: Path, state_dir: Path, **env: str) -> Daemon:
    """A daemon whose state dir is `state_dir` (a small filesystem)."""
    d = make_daemon(base)
    d.state_dir = state_dir
    d.extra_env.update(env)
    return d


def wait_for(check: Any, timeout: float = 30.0) -> bool:
    return wait_until(check, timeout, interval=0.1)


def outbox_paths(state_dir: Path) -> list[str]:
    import json

    path = state_dir / "outbox.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["path"] for line in path.read_bytes().splitlines() if line.strip()]


def events_in(root: Path, batch: str) -> set[str]:
    folder = root / "events" / batch
    return {f"events/{batch}/{p.name}" for p in folder.glob("*.json")} if folder.exists() else set()


def queued_events_on_a_full_state_dir(base: Path, *, events: int = 20) -> dict[str, Any]:
    """The finding: `record-event --queue-on-failure` while the backend cannot take
    the event (its root is full) and the state dir cannot take the outbox line
    either; then the state dir gets space back (no restart), more events are
    queued; then the backend gets space back and the outbox drains. Every exit 0
    must end up in the backend."""
    with small_fs() as state, small_fs() as backend:
        d = daemon_on(base, state.path / "state")
        d.root = backend.path / "root"
        d.root.mkdir()
        d.start()
        try:
            record = ("record-event", "--batch-id", "b1", "--type", "note", "--queue-on-failure")
            backend.fill()
            state.fill()
            codes: dict[int, int] = {}
            named = 0
            started = time.monotonic()
            for n in range(events):
                result = d.ctl(*record, "--message", f"full {n}")
                codes[result.returncode] = codes.get(result.returncode, 0) + 1
                named += str(d.state_dir) in result.stderr.decode()
            full_seconds = time.monotonic() - started
            torn = (d.state_dir / "outbox.jsonl").exists() and (d.state_dir / "outbox.jsonl").read_bytes()
            state.free()  # space comes back; the daemon is not restarted
            acked: list[str] = []
            for n in range(events):
                result = d.ctl(*record, "--message", f"freed {n}", "--json")
                if result.returncode == 0:
                    import json

                    acked.append(json.loads(result.stdout)["path"])
            queued = outbox_paths(d.state_dir)
            backend.free()
            d.ctl("outbox", "flush")
            delivered = wait_for(lambda: set(acked) <= events_in(d.root, "b1"))
            lost = len(set(acked) - events_in(d.root, "b1"))
            return {"events": events, "full_exit_codes": codes, "full_errors_naming_dir": named,
                    "full_seconds": round(full_seconds, 2), "torn_outbox_bytes": len(torn or b""),
                    "acked_after_space_returned": len(acked), "queued": len(queued),
                    "delivered": bool(delivered), "acked_lost": lost,
                    "daemon_alive": d.proc is not None and d.proc.poll() is None}
        finally:
            d.stop()
