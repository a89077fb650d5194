"""Fixtures: a real agentcoordd subprocess in a short temp dir (helpers in helpers.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import Daemon, make_daemon


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay short (108 bytes): pytest's tmp_path can be too long."""
    path = Path(tempfile.mkdtemp(prefix="acit.", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon_factory(short_dir: Path) -> Iterator[Any]:
    made: list[Daemon] = []

    def factory(name: str = "d") -> Daemon:
        base = short_dir / name
        base.mkdir()
        d = make_daemon(base)
        made.append(d)
        return d

    yield factory
    for d in made:
        d.stop()


@pytest.fixture
def daemon(daemon_factory: Any) -> Daemon:
    d = daemon_factory()
    d.start()
    return d
