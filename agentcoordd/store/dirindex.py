"""What each directory below a local state root holds, and what changed in it.

The parsed-record cache (`store/cache.py`) asks this index for a directory's
listing — its record files (name, inode) and subdirectories — and for the
names that changed since a generation it saw. Where inotify watches the
directory (Linux, a local filesystem), a listing is re-read only after a
create, delete or rename in it, and a record is re-checked only after a
notice names it (write, rename over, permission change). Elsewhere (no
inotify, a network or FUSE filesystem whose other writers no local notice
sees, the watch limit reached) a directory is re-listed when its stat stamp
moved, or when it changed too recently for its timestamps to tell (`RACY_NS`),
and every mutable record is re-checked by `lstat` (another tool may rewrite a
file in place, which leaves the directory alone).

A watch is added before the listing it guards is read, and pending notices
are taken in before every scan, so a change that completes before a scan
starts is always seen by it. An overflowed notice queue makes every
directory look changed. Not seen: a record hard-linked into the root and
written through its other name (no notice reaches this directory's watch).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from agentcoordd.store import inotify

# Timestamps come from a coarse clock (a few ms): a change this soon after the
# last one may leave them unchanged, so nothing that recent is trusted by stamp.
RACY_NS = 2_000_000_000

# Filesystems where other machines write (or where local notices are not
# reliable): the index keeps to stat stamps there.
_UNWATCHED_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "9p", "afs", "lustre", "gfs2",
    "ocfs2", "glusterfs", "fuse", "fuseblk", "sshfs", "davfs", "vboxsf", "virtiofs",
})


@dataclass(slots=True, eq=False)
class Listing:
    # (path below the root, inode) of record files, sorted; the path strings are
    # the ones the cache keys and rows reuse (one copy per record, not three).
    files: list[tuple[str, int]]
    subdirs: dict[str, int]  # name -> inode
    symlink: str | None  # the first symlink seen: refused by every scan while there


class DirState:
    __slots__ = ("gen", "ino", "listed_at", "listing", "name_gens", "rel", "reset_gen", "stamp", "wd")

    def __init__(self, rel: str, ino: int) -> None:
        self.rel = rel
        self.ino = ino
        self.wd = -1  # inotify watch, or -1: this directory is checked by stat
        self.listing: Listing | None = None  # None: to be (re)read
        self.stamp: tuple[int, int, int] | None = None
        self.listed_at = 0
        self.gen = 0  # bumped by every notice for this directory
        self.name_gens: dict[str, int] = {}  # record name -> gen of its last notice
        self.reset_gen = 0  # a reader that saw less than this rechecks every record

    @property
    def watched(self) -> bool:
        return self.wd >= 0


class DirIndex:
    """Listings of the directories below `root`; blocking, one thread at a time."""

    def __init__(self, root: str, *, notify: bool = True) -> None:
        self.root = root
        self._notify = inotify.open_inotify() if notify and unwatched_fs(root) is None else None
        self._dirs: dict[str, DirState] = {}
        self._by_wd: dict[int, DirState] = {}

    @property
    def mechanism(self) -> str:
        return "stat" if self._notify is None else "inotify"

    def refresh(self) -> None:
        """Take in the pending change notices."""
        if self._notify is None:
            return
        for wd, mask, name in self._notify.read_events():
            if mask & inotify.IN_Q_OVERFLOW:
                for every in self._dirs.values():
                    self._reset(every)
                continue
            state = self._by_wd.get(wd)
            if state is None:
                continue
            if mask & (inotify.IN_IGNORED | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
                self._forget(state)
            elif name and name[0] != ".":  # dot files are temp files of in-flight writes
                self._changed(state, name, mask & _ENTRY_CHANGE != 0)

    def state(self, rel: str, ino: int) -> DirState:
        """The state of directory `rel` whose inode is `ino` (a new one when it was replaced)."""
        state = self._dirs.get(rel)
        if state is not None and state.ino != ino:
            self._forget(state)
            state = None
        if state is None:
            state = self._dirs[rel] = DirState(rel, ino)
        return state

    def listing(self, state: DirState) -> Listing | None:
        """The current listing of `state`'s directory; None if it is gone. OSError
        (other than gone) propagates: the caller words it."""
        full = f"{self.root}/{state.rel}"
        if state.listing is not None and (state.watched or self._stamp_holds(state, full)):
            return state.listing
        if self._notify is not None and not state.watched:
            wd = self._notify.add_watch(full)  # before the listing: a later write is a notice
            if wd >= 0:
                other = self._by_wd.get(wd)
                if other is not None and other is not state:
                    self._forget(other, remove_watch=False)  # the same directory, moved
                state.wd = wd
                self._by_wd[wd] = state
                self._reset(state)  # what was checked by stat before is not covered by notices
        if not state.watched:
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                self._forget(state)
                return None
            state.stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        try:
            listing = _read_listing(full, state.rel)
        except FileNotFoundError:
            self._forget(state)
            return None
        state.listed_at = time.time_ns()
        state.listing = listing
        if state.name_gens:
            live = {path.rpartition("/")[2] for path, _ in listing.files}
            state.name_gens = {n: g for n, g in state.name_gens.items() if n in live}
        state.gen += 1
        return listing

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None
        self._dirs.clear()
        self._by_wd.clear()

    def _stamp_holds(self, state: DirState, full: str) -> bool:
        try:
            st = os.lstat(full)
        except OSError:
            return False
        if (st.st_ino, st.st_mtime_ns, st.st_ctime_ns) != state.stamp:
            return False
        return state.listed_at - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS

    def _changed(self, state: DirState, name: str, entries: bool) -> None:
        state.gen += 1
        state.name_gens[name] = state.gen
        if entries:
            state.listing = None

    @staticmethod
    def _reset(state: DirState) -> None:
        """Anything in the directory may have changed: re-list it, recheck every record."""
        state.gen += 1
        state.reset_gen = state.gen
        if state.watched:
            state.listing = None

    def _forget(self, state: DirState, remove_watch: bool = True) -> None:
        if self._dirs.get(state.rel) is state:
            del self._dirs[state.rel]
        if state.watched:
            if self._by_wd.get(state.wd) is state:
                del self._by_wd[state.wd]
            if remove_watch and self._notify is not None:
                self._notify.rm_watch(state.wd)
            state.wd = -1
        state.listing = None
        # Its subdirectories are reached through it: they may have moved with it.
        below = state.rel + "/"
        for child in [s for key, s in self._dirs.items() if key.startswith(below)]:
            self._forget(child, remove_watch)


_ENTRY_CHANGE = inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO


def _read_listing(full: str, rel: str) -> Listing:
    files: list[tuple[str, int]] = []
    subdirs: dict[str, int] = {}
    symlink = None
    with os.scandir(full) as it:
        for entry in it:
            name = entry.name
            if name[0] == ".":
                continue  # temp files of in-flight writes
            if entry.is_symlink():
                symlink = symlink or name
            elif entry.is_dir(follow_symlinks=False):
                subdirs[name] = entry.inode()
            elif name.endswith(".json"):
                files.append((f"{rel}/{name}", entry.inode()))
    files.sort()
    return Listing(files, subdirs, symlink)


_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040


def unwatched_fs(path: str, mountinfo: str | None = None) -> str | None:
    """The type of the filesystem holding `path` when local notices cannot be
    trusted there (network, FUSE); None otherwise or when it cannot be told.
    `mountinfo`: the mount table's text (default: this process's)."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
                mountinfo = mounts.read()
        except OSError:
            return None
    lines = mountinfo.splitlines()
    target = os.path.realpath(path)
    best, fstype = -1, ""
    for line in lines:
        fields = line.split()
        try:
            point = _OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[4])
            kind = fields[fields.index("-") + 1]
        except (IndexError, ValueError):
            continue
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, fstype = len(point), kind
    base = fstype.split(".", 1)[0]
    return fstype if base in _UNWATCHED_FS else None
