"""store.files: the durable write helpers the local store, lanes file and outbox share."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentcoordd.store.files import replace_private


def test_replace_private_writes_0600_atomically_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "lanes.json"
    path.write_bytes(b"old")
    body = os.urandom(8 << 20)  # large: written whole (write_all loops over short writes)
    replace_private(path, body)
    assert path.read_bytes() == body
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lanes.json"]


def test_a_failed_replace_keeps_the_old_file_and_removes_the_temp(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "outbox.jsonl"
    path.write_bytes(b"old\n")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        replace_private(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outbox.jsonl"]

