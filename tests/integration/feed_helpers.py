"""A real `agentcoordctl events --follow --json` process, read line by line (every backend)."""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from typing import Any

from .helpers import PYTHON


class FollowProcess:
    """`events --follow --json …` as a subprocess; each printed line with its arrival time."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", "events", "--follow",
                                      "--json", *argv], env=env, cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=self._err)
        self.lines: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._finished: tuple[int, str] | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put((time.monotonic(), json.loads(raw)))

    def take(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The next `count` events printed (fails if they do not come in time)."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            try:
                out.append(self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))[1])
            except queue.Empty:
                raise AssertionError(f"only {len(out)} of {count} events arrived: {out}; "
                                     f"stderr so far: {self.finish(kill=True)[1]}") from None
        return out

    def finish(self, timeout: float = 20.0, kill: bool = False) -> tuple[int, str]:
        if self._finished is not None:
            return self._finished
        if kill and self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._err.seek(0)
        self._finished = (self.proc.returncode, self._err.read().decode(errors="replace"))
        self._err.close()
        return self._finished


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["event_id"] for row in rows]
