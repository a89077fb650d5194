"""stdout and stderr that cannot turn a finished command into a crash.

An agent acts on the exit code, and the command's effect (a claim written)
has happened before anything is printed. So a failing write never raises
into the command: `Guarded` remembers the first error and drops what follows,
and `exit_code` decides at the end: a closed pipe (EPIPE, `| head -1`) ends
quietly with the command's own code; any other output error (stdout closed,
disk full) is exit 2 with one stderr line that says the command itself
succeeded, because the caller did not get its output. stderr failures are
dropped: diagnostics must not change the outcome.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

OUTPUT_ERROR_EXIT = 2


class Guarded:
    """A text stream whose writes never raise (the real one, or None when fd is closed)."""

    def __init__(self, stream: Any, fd: int) -> None:
        self._stream = stream
        self._fd = fd
        self.error: OSError | None = None if stream is not None else OSError(
            errno.EBADF, "Bad file descriptor")

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._failed(exc)

    def isatty(self) -> bool:
        return self.error is None and self._stream.isatty()

    def fileno(self) -> int:
        return self._fd

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, … for click
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)

    def _failed(self, exc: Exception) -> None:
        self.error = exc if isinstance(exc, OSError) else OSError(errno.EBADF, str(exc))
        # Unflushed bytes would fail again at interpreter exit: point the fd at /dev/null.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._fd)
            os.close(devnull)
        except OSError:
            pass


def install() -> tuple[Guarded, Guarded]:
    out = Guarded(sys.stdout, 1)
    err = Guarded(sys.stderr, 2)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    return out, err


def failed() -> bool:
    """The output is gone (long-running commands stop writing)."""
    out = sys.stdout
    return isinstance(out, Guarded) and out.error is not None


def exit_code(code: int, out: Guarded) -> int:
    """The exit code once the command returned `code` and its output went to `out`."""
    out.flush()
    error = out.error
    if error is None or error.errno == errno.EPIPE:
        return code
    outcome = "succeeded" if code == 0 else f"exited {code}"
    print(f"agentcoordctl: could not write the output ({error.strerror or error}); the command "
          f"itself {outcome}", file=sys.stderr, flush=True)
    return OUTPUT_ERROR_EXIT if code == 0 else code
