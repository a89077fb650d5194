"""The one error taxonomy every layer raises; each error knows its exit code.

Exit codes follow the spec: 1 usage, 2 operational (UNKNOWN), 3 CLAIM_REFUSED.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_OPERATIONAL = 2
EXIT_CLAIM_REFUSED = 3


class CoordError(Exception):
    """Base class: a one-line message plus the exit code it maps to."""

    exit_code = EXIT_OPERATIONAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CoordError):
    """The invocation itself is wrong (bad id, missing flag, conflicting flags)."""

    exit_code = EXIT_USAGE


class OperationalError(CoordError):
    """The backend could not be trusted for this command: report UNKNOWN."""

    exit_code = EXIT_OPERATIONAL


class ClaimRefused(CoordError):
    """Another holder is live, stale, or still inside its lease."""

    exit_code = EXIT_CLAIM_REFUSED

    def __init__(self, message: str, *, holder: str, liveness: str) -> None:
        super().__init__(message)
        self.holder = holder
        self.liveness = liveness
