"""The one error taxonomy every layer raises; each error knows its exit code.

Exit codes follow the spec: 1 usage, 2 operational (UNKNOWN), 3 CLAIM_REFUSED,
4 RESERVATION_REFUSED (capacity admission, ADR 0008).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_OPERATIONAL = 2
EXIT_CLAIM_REFUSED = 3
EXIT_RESERVATION_REFUSED = 4


class CoordError(Exception):
    """Base class: a one-line message plus the exit code it maps to."""

    exit_code = EXIT_OPERATIONAL

    def __init__(self, message: str, *, words: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # agent-coord's own words where our message adds to them (a JSON field that
        # carries the error, like batch-audit's `reason`, keeps exactly agent-coord's).
        self.words = words or message


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


class ReservationRefused(CoordError):
    """Capacity admission said no: a reservation (or its consume/release) refused for
    capacity, a missing/disabled/mismatched input, a limited quota host, or a payload
    conflicting with an existing reservation id. `outcome` is the contract's name
    (RESERVATION_REFUSED or RESERVATION_CONFLICT); the message starts with it."""

    exit_code = EXIT_RESERVATION_REFUSED

    def __init__(self, reason: str, outcome: str = "RESERVATION_REFUSED") -> None:
        super().__init__(f"{outcome}: {reason}")
        self.outcome = outcome
        self.reason = reason
