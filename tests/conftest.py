"""Suite-wide fixtures: one async backend, the shared spec location, a fake clock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def shared_dir() -> Path:
    """../shared next to the checkout; tests that need it skip cleanly without it."""
    if not (SHARED / "spec").is_dir():
        pytest.skip("../shared (spec fixtures) is not present next to this checkout")
    return SHARED


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
