"""The simulation harness (`python -m sim`) lives at the repository root, outside the
installed packages: put the root on sys.path for these tests."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="acsim-test."))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
