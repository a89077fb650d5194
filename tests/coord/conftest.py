"""Fixtures for the use-case tests: a real LocalStore in a temp dir, a fake clock.

`FakeClock` and the `clock` fixture live in tests/conftest.py; modules may
override `store` / `ctx` with their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.coord.context import Ctx
from agentcoordd.store.local import LocalStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def store(root: Path) -> LocalStore:
    return LocalStore(root)


@pytest.fixture
def ctx(store: LocalStore, clock) -> Ctx:  # noqa: ANN001 - FakeClock from tests/conftest.py
    return Ctx(store, clock)
