"""Suite-wide fixtures: one async backend, the recorded fixtures' location, a fake clock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

# Recorded data copied verbatim from ../shared (each directory's README.md says
# from where); the suite never reads ../shared itself, a fresh clone has none.
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: agent-coord's recorded outputs, state root and contracts."""
    return FIXTURES


class FakeClock:
    """A controllable wall clock (the only fake the suite uses)."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.current = start or dt.datetime(2026, 6, 13, 0, 30, tzinfo=dt.timezone.utc)

    def now(self) -> dt.datetime:
        return self.current

    def advance(self, **delta: float) -> None:
        self.current += dt.timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
