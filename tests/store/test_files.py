"""store.files: the durable write helpers the local store, lanes file and outbox share."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentcoordd.store.files import TEMP_NAME, replace_private, temp_path


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



def test_temp_names_are_unique_per_process_and_read_by_the_stale_sweep(tmp_path: Path) -> None:
    names = [os.path.basename(temp_path(tmp_path / "1.json")) for _ in range(10_000)]
    assert len(set(names)) == len(names)
    for name in (names[0], names[-1]):
        match = TEMP_NAME.match(name)
        assert match is not None and int(match.group(1)) == os.getpid()
