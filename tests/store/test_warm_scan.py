"""Warm scans of the parsed-record cache against any writer (issue 24).

Each case runs twice: with the inotify directory index and with the stat
fallback (`notify=False`, what a network filesystem gets). Writers here are
plain file operations — the way another tool (the Ruby agent-coord, an editor,
a second daemon) changes a root — never the store the cache wraps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.store.base import Forbidden
from agentcoordd.store.cache import CachingStore, Malformed, scan
from agentcoordd.store.dirindex import unwatched_fs
from agentcoordd.store.local import LocalStore

pytestmark = pytest.mark.anyio


def whole(path: str, data: Any) -> Any:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    return data


def put(root: Path, rel: str, data: Any) -> None:
    """An atomic replace (temp file + rename), as agentcoord's own writers do."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def rewrite_in_place(path: Path, data: Any) -> None:
    """Truncate and write the same inode (the Ruby tool's style)."""
    with open(path, "r+") as handle:
        handle.truncate(0)
        handle.write(json.dumps(data))


@pytest.fixture(params=[True, False], ids=["inotify", "stat"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CachingStore:
    root = tmp_path / "root"
    root.mkdir()
    made = CachingStore(LocalStore(root), notify=request.param)
    assert made.change_detection == ("inotify" if request.param and sys.platform.startswith("linux") else "stat")
    return made


async def values(store: CachingStore, prefix: str = "claims") -> dict[str, Any]:
    found = await scan(store, prefix, whole, "t.whole")
    assert not found.unreadable, found.unreadable
    return {path: data["v"] for path, data in found.rows}


async def test_create_delete_and_rename_over_are_seen(store: CachingStore) -> None:
    root = store.root
    put(root, "claims/r/a.json", {"v": 1})
    put(root, "claims/r/b.json", {"v": 2})
    assert await values(store) == {"claims/r/a.json": 1, "claims/r/b.json": 2}
    put(root, "claims/r/c.json", {"v": 3})  # create
    (root / "claims/r/a.json").unlink()  # delete
    put(root, "claims/r/b.json", {"v": 20})  # rename over
    assert await values(store) == {"claims/r/b.json": 20, "claims/r/c.json": 3}
    assert store.cached_entries()["t.whole"] == 2
    put(root, "claims/s/d.json", {"v": 4})  # a new directory
    assert await values(store) == {"claims/r/b.json": 20, "claims/r/c.json": 3, "claims/s/d.json": 4}


async def test_in_place_rewrite_of_the_same_size_and_mtime_is_seen(store: CachingStore) -> None:
    root = store.root
    put(root, "claims/r/a.json", {"v": 1})
    record = root / "claims/r/a.json"
    before = record.stat()
    assert await values(store) == {"claims/r/a.json": 1}
    rewrite_in_place(record, {"v": 2})  # same size, same inode
    os.utime(record, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old mtime back
    after = record.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert await values(store) == {"claims/r/a.json": 2}
    # Twice within one timestamp tick: the second write leaves (mtime, ctime, size)
    # as the first did; it is seen all the same.
    rewrite_in_place(record, {"v": 3})
    assert await values(store) == {"claims/r/a.json": 3}
    rewrite_in_place(record, {"v": 4})
    assert await values(store) == {"claims/r/a.json": 4}


async def test_a_torn_write_is_reported_then_the_fixed_record_is_read(store: CachingStore) -> None:
    root = store.root
    put(root, "claims/r/a.json", {"v": 1})
    assert await values(store) == {"claims/r/a.json": 1}
    (root / "claims/r/a.json").write_text('{"v": ')
    found = await scan(store, "claims", whole, "t.whole")
    assert found.rows == [] and found.unreadable == [("claims/r/a.json", "invalid JSON")]
    rewrite_in_place(root / "claims/r/a.json", {"v": 5})
    assert await values(store) == {"claims/r/a.json": 5}


async def test_a_foreign_process_rewriting_records_is_seen(store: CachingStore) -> None:
    root = store.root
    for n in range(20):
        put(root, f"heartbeats/agent-{n:02d}.json", {"v": n})
    assert len(await values(store, "heartbeats")) == 20
    writer = (
        "import json, sys\n"
        "for n in range(0, 20, 3):\n"
        "    with open(f'{sys.argv[1]}/heartbeats/agent-{n:02d}.json', 'w') as f:\n"
        "        json.dump({'v': 100 + n}, f)\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(root)], check=True)
    seen = await values(store, "heartbeats")
    assert seen == {f"heartbeats/agent-{n:02d}.json": (100 + n if n % 3 == 0 else n) for n in range(20)}


async def test_a_replaced_directory_is_read_afresh(store: CachingStore) -> None:
    root = store.root
    put(root, "events/b1/e1.json", {"v": 1})
    put(root, "events/b1/e2.json", {"v": 2})
    assert await values(store, "events") == {"events/b1/e1.json": 1, "events/b1/e2.json": 2}
    os.rename(root / "events/b1", root / "events/.old")
    put(root, "events/b1/e1.json", {"v": 10})
    assert await values(store, "events") == {"events/b1/e1.json": 10}
    os.rename(root / "events", root / ".gone")  # the family directory itself
    put(root, "events/b2/e9.json", {"v": 9})
    assert await values(store, "events") == {"events/b2/e9.json": 9}


async def test_a_symlink_is_refused_on_every_scan_until_removed(store: CachingStore) -> None:
    root = store.root
    put(root, "claims/r/a.json", {"v": 1})
    assert await values(store) == {"claims/r/a.json": 1}
    (root / "claims/r/evil.json").symlink_to("/etc/passwd")
    for _ in range(2):
        with pytest.raises(Forbidden, match="symlink below state root refused: claims/r/evil.json"):
            await values(store)
    (root / "claims/r/evil.json").unlink()
    assert await values(store) == {"claims/r/a.json": 1}


async def test_only_changed_records_are_read_again(tmp_path: Path, record_loads: list[str]) -> None:
    root = tmp_path / "root"
    for n in range(50):
        put(root, f"heartbeats/agent-{n:02d}.json", {"v": n})
    loads = record_loads
    store = CachingStore(LocalStore(root))  # inotify: freshly written records are trusted by notice
    assert len(await values(store, "heartbeats")) == 50
    assert len(loads) == 50
    loads.clear()
    assert len(await values(store, "heartbeats")) == 50
    assert loads == []
    put(root, "heartbeats/agent-07.json", {"v": 700})
    os.chmod(root / "heartbeats/agent-08.json", 0o600)  # may have made it unreadable: read again
    seen = await values(store, "heartbeats")
    assert seen["heartbeats/agent-07.json"] == 700 and len(seen) == 50
    assert loads == ["heartbeats/agent-07.json", "heartbeats/agent-08.json"]


async def test_an_overflowed_notice_queue_rechecks_everything(tmp_path: Path) -> None:
    root = tmp_path / "root"
    put(root, "claims/r/a.json", {"v": 1})
    put(root, "claims/noise/x.json", {"v": 0})
    store = CachingStore(LocalStore(root))
    assert store.change_detection == "inotify"
    assert await values(store) == {"claims/r/a.json": 1, "claims/noise/x.json": 0}
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    noise = root / "claims/noise"
    for n in range(limit // 2 + 10):  # two distinct events each: the queue overflows
        (noise / f"n{n}").touch()
        (noise / f"n{n}").unlink()
    # This write's notice is lost in the overflow; the recheck finds it by stat.
    rewrite_in_place(root / "claims/r/a.json", {"v": 2})
    assert await values(store) == {"claims/r/a.json": 2, "claims/noise/x.json": 0}


MOUNTS = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/shared rw,relatime shared:2 - nfs4 server:/export rw,vers=4.2
41 40 0:36 / /mnt/shared/local\\040disk rw shared:3 - ext4 /dev/sdb1 rw
42 22 0:37 / /home/u/fuse rw shared:4 - fuse.sshfs u@h:/ rw
"""


def test_network_filesystems_are_left_to_stat() -> None:
    assert unwatched_fs("/mnt/shared/state", MOUNTS) == "nfs4"
    assert unwatched_fs("/mnt/shared/local disk/state", MOUNTS) is None  # the longest mount point wins
    assert unwatched_fs("/home/u/fuse/root", MOUNTS) == "fuse.sshfs"
    assert unwatched_fs("/home/u/fuser", MOUNTS) is None  # a prefix of a name is not inside
    assert unwatched_fs("/var/lib/x", MOUNTS) is None


PERMISSION_CHILD = """
import json, os, sys, anyio
from agentcoordd.store.cache import CachingStore, scan
from agentcoordd.store.local import LocalStore

def whole(path, data):
    return data

async def main():
    root = sys.argv[1]
    os.makedirs(f"{root}/claims/r")
    for name in ("a", "b"):
        with open(f"{root}/claims/r/{name}.json", "w") as f:
            json.dump({"v": name}, f)
    store = CachingStore(LocalStore(root), notify=sys.argv[2] == "inotify")
    seen = []
    async def look():
        found = await scan(store, "claims", whole, "t")
        seen.append({"rows": [p for p, _ in found.rows], "unreadable": found.unreadable})
    await look()
    os.chmod(f"{root}/claims/r/a.json", 0)
    await look()
    os.chmod(f"{root}/claims/r/a.json", 0o644)
    await look()
    print(json.dumps(seen))

anyio.run(main)
"""


@pytest.mark.parametrize("mode", ["inotify", "stat"])
def test_a_record_made_unreadable_is_reported_then_read_again(permission_bits_apply: list[str],
                                                             mode: str) -> None:
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="acperm.", dir="/tmp"))
    try:
        if permission_bits_apply:  # root: the child runs as the second user, in its own tree
            uid = int(permission_bits_apply[permission_bits_apply.index("--reuid") + 1])
            gid = int(permission_bits_apply[permission_bits_apply.index("--regid") + 1])
            os.chown(base, uid, gid)
        done = subprocess.run([*permission_bits_apply, sys.executable, "-c", PERMISSION_CHILD,
                               str(base / "root"), mode],
                              capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).parents[2]))
        assert done.returncode == 0, done.stderr
        first, hidden, back = json.loads(done.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert first == {"rows": ["claims/r/a.json", "claims/r/b.json"], "unreadable": []}
    assert hidden == {"rows": ["claims/r/b.json"],
                      "unreadable": [["claims/r/a.json", "cannot read: Permission denied"]]}
    assert back == first
