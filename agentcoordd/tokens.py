"""Machine tokens for the Worker backend: provision, rotate, revoke.

The core of `agentcoordctl token provision|revoke` (issue 6 item 3). A token is
32 random bytes (URL-safe base64); D1 stores only its SHA-256 hex digest, so
the plaintext exists once, in what `provision` returns for the caller to print.
The SQL runs through wrangler (`wrangler d1 execute`) in the Worker project
whose wrangler.toml names the D1 database — `--worker-dir`, else
$AGENT_COORD_WORKER_DIR, else `./worker` of the caller (a checkout), else the
checkout this package was installed from — with the project's pinned wrangler
(`worker/bin/wrangler`) when its toolchain is installed, else `wrangler` on
PATH; against the local dev database (`--local`, optionally `--persist-to
DIR`, resolved against the caller's directory) or a named remote database.

Nothing here logs or stores the token.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import secrets
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentcoordd.model.errors import OperationalError, UsageError

# A source checkout's own Worker project (an editable install); a wheel has none.
CHECKOUT_WORKER_DIR = Path(__file__).resolve().parents[1] / "worker"
WORKER_DIR_VAR = "AGENT_COORD_WORKER_DIR"
DEFAULT_DATABASE = "agent-coord"

_MACHINE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_DATABASE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SEG = r"[A-Za-z0-9_.:-]+"
_ADMISSION = "capacity_profiles|inboxes|lane_occupancies|capacity_reservations|capacity_holds"
_RECORD = [
    re.compile(rf"claims/{_SEG}/{_SEG}/{_SEG}\.json"),
    re.compile(rf"heartbeats/{_SEG}\.json"),
    re.compile(rf"batches/{_SEG}\.json"),
    re.compile(rf"events/{_SEG}/{_SEG}\.json"),
    re.compile(rf"host_limits/{_SEG}/{_SEG}/{_SEG}/{_SEG}\.json"),
    re.compile(rf"(?:{_ADMISSION})/{_SEG}/{_SEG}\.json"),
]
_DIRECTORY = [
    re.compile(r"claims"),
    re.compile(rf"claims/{_SEG}"),
    re.compile(rf"claims/{_SEG}/{_SEG}"),
    re.compile(r"heartbeats"),
    re.compile(r"batches"),
    re.compile(r"events"),
    re.compile(rf"events/{_SEG}"),
    re.compile(rf"host_limits(?:/{_SEG}){{0,3}}"),
    re.compile(rf"(?:{_ADMISSION})(?:/{_SEG})?"),
]


def _has_dot_segment(value: str) -> bool:
    return ".." in value or any(s in ("", ".") for s in value.split("/"))


def valid_scope(scope: str) -> bool:
    """A directory prefix or an exact record path the Worker accepts as a scope."""
    if not scope or _has_dot_segment(scope) or len(scope.encode("utf-8")) > 520:
        return False
    if scope == "archive":
        return True
    rest = scope.removeprefix("archive/")
    return any(p.fullmatch(rest) for p in _RECORD + _DIRECTORY)


def machine_name(value: str) -> str:
    if not _MACHINE.fullmatch(value):
        raise UsageError(
            f"invalid machine name: {value!r} (letters, digits, '.', '_', ':', '-')"
        )
    return value


def database_name(value: str) -> str:
    if not _DATABASE.fullmatch(value):
        raise UsageError(f"invalid database name: {value!r} (letters, digits, '.', '_', '-')")
    return value


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return "acd_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Provision:
    machine: str
    token: str  # shown once; never persisted by this module
    read_prefixes: list[str]
    write_prefixes: list[str]
    sql: str  # holds only the hash

    def __repr__(self) -> str:  # keep the token out of tracebacks and logs
        return f"Provision(machine={self.machine!r}, read={self.read_prefixes}, write={self.write_prefixes})"


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def build_provision(
    machine: str,
    *,
    read_prefixes: Sequence[str] = (),
    write_prefixes: Sequence[str] = (),
    all_state: bool = False,
    rotate: bool = False,
    now: dt.datetime | None = None,
    token: str | None = None,
) -> Provision:
    """Validate the request and build the SQL; the token is returned once.

    Refuses a call with no scope, and one mixing prefixes with `all_state`.
    Without `rotate`, an existing machine row makes the SQL fail (primary key);
    with it, the row is re-keyed (or inserted when missing) and un-revoked.
    """
    machine_name(machine)
    reads, writes = list(read_prefixes), list(write_prefixes)
    if all_state and (reads or writes):
        raise UsageError("--all-state cannot be combined with --read-prefix/--write-prefix")
    if not all_state and not (reads or writes):
        raise UsageError("give at least one --read-prefix or --write-prefix, or --all-state")
    for scope in reads + writes:
        if not valid_scope(scope):
            raise UsageError(
                f"invalid scope prefix: {scope!r} (a state directory such as claims/OWNER/REPO "
                "or a record path such as heartbeats/ID.json; use --all-state for everything)"
            )
    if all_state:
        reads, writes = [""], [""]
    token = token or new_token()
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    values = ", ".join(
        _sql_text(v)
        for v in (machine, hash_token(token), json.dumps(reads), json.dumps(writes), stamp)
    )
    sql = (
        "INSERT INTO machines (machine, token_sha256, read_prefixes, write_prefixes, created_at) "
        f"VALUES ({values})"
    )
    if rotate:
        sql += (
            " ON CONFLICT (machine) DO UPDATE SET token_sha256 = excluded.token_sha256,"
            " read_prefixes = excluded.read_prefixes, write_prefixes = excluded.write_prefixes,"
            " rotated_at = excluded.created_at, revoked_at = NULL"
        )
    return Provision(machine, token, reads, writes, sql + ";")


def build_revoke(machine: str, *, now: dt.datetime | None = None) -> str:
    machine_name(machine)
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"UPDATE machines SET revoked_at = {_sql_text(stamp)} "
        f"WHERE machine = {_sql_text(machine)} AND revoked_at IS NULL;"
    )


def find_worker_dir(explicit: str | None = None, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> Path:
    """The Worker project (a directory holding wrangler.toml)."""
    env = os.environ if env is None else env
    base = Path(cwd or os.getcwd())
    given = explicit or env.get(WORKER_DIR_VAR)
    if given:
        path = (base / Path(given).expanduser()).resolve()
        if not (path / "wrangler.toml").is_file():
            raise OperationalError(f"no wrangler.toml in the Worker directory {path}")
        return path
    for candidate in (base / "worker", CHECKOUT_WORKER_DIR):
        if (candidate / "wrangler.toml").is_file():
            return candidate.resolve()
    raise OperationalError(
        "the Worker project (wrangler.toml) was not found: run from an agentcoord checkout, "
        f"pass --worker-dir DIR or set {WORKER_DIR_VAR}")


def wrangler_program(worker_dir: Path) -> str:
    """The project's pinned wrangler when its toolchain is installed, else PATH's."""
    pinned = worker_dir / "bin" / "wrangler"
    if pinned.is_file() and (worker_dir / "node_modules").is_dir():
        return str(pinned)
    found = shutil.which("wrangler")
    if found is None:
        raise OperationalError(
            f"wrangler not found: install the Worker toolchain (bash {worker_dir}/ci-install.sh, "
            "or npm ci in that directory) or put wrangler on PATH")
    return found


def wrangler_command(
    sql: str,
    *,
    database: str = DEFAULT_DATABASE,
    local: bool = True,
    persist_to: str | Path | None = None,
    worker_dir: Path | None = None,
) -> list[str]:
    worker_dir = worker_dir or find_worker_dir()
    cmd = [wrangler_program(worker_dir), "d1", "execute", database_name(database)]
    cmd += ["--local"] if local else ["--remote"]
    if persist_to is not None:
        if not local:
            raise UsageError("--persist-to only applies to --local")
        cmd += ["--persist-to", str(persist_to)]
    return cmd + ["--yes", "--command", sql]


def execute(
    sql: str,
    *,
    database: str = DEFAULT_DATABASE,
    local: bool = True,
    persist_to: str | Path | None = None,
    worker_dir: Path | None = None,
    timeout: float = 120.0,
) -> None:
    """Run SQL with wrangler; on failure keep wrangler's own output in the error.

    The SQL carries hashes only, so echoing wrangler's output is safe.
    """
    worker_dir = worker_dir or find_worker_dir()
    if persist_to is not None:  # the caller's path, not one inside the Worker directory
        persist_to = Path(persist_to).expanduser().absolute()
    cmd = wrangler_command(
        sql, database=database, local=local, persist_to=persist_to, worker_dir=worker_dir
    )
    try:
        done = subprocess.run(
            cmd, cwd=worker_dir, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OperationalError(f"wrangler d1 execute failed to run: {exc}") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        if "UNIQUE constraint failed: machines.machine" in output:
            raise UsageError("that machine already has a token: pass --rotate to re-key it")
        raise OperationalError(f"wrangler d1 execute failed (exit {done.returncode}):\n{output}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m agentcoordd.tokens provision|revoke ...`: the same core without the ctl
    (`agentcoordctl token provision|revoke` is the documented entry point)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m agentcoordd.tokens")
    sub = parser.add_subparsers(dest="command", required=True)
    prov = sub.add_parser("provision", help="create (or --rotate) a machine token; prints it once")
    prov.add_argument("machine")
    prov.add_argument("--read-prefix", action="append", default=[])
    prov.add_argument("--write-prefix", action="append", default=[])
    prov.add_argument("--all-state", action="store_true")
    prov.add_argument("--rotate", action="store_true")
    rev = sub.add_parser("revoke", help="revoke a machine's token")
    rev.add_argument("machine")
    for p in (prov, rev):
        where = p.add_mutually_exclusive_group()
        where.add_argument("--local", action="store_true", help="the wrangler dev database (default)")
        where.add_argument("--database", help="a remote D1 database by name")
        p.add_argument("--persist-to", help="local persistence dir (with --local)")
    args = parser.parse_args(argv)
    remote = args.database is not None
    target = dict(
        database=args.database or DEFAULT_DATABASE, local=not remote, persist_to=args.persist_to
    )
    try:
        if args.command == "provision":
            grant = build_provision(
                args.machine,
                read_prefixes=args.read_prefix,
                write_prefixes=args.write_prefix,
                all_state=args.all_state,
                rotate=args.rotate,
            )
            execute(grant.sql, **target)
            print(grant.token)
        else:
            execute(build_revoke(args.machine), **target)
            print(f"revoked: {args.machine}", file=sys.stderr)
    except (UsageError, OperationalError) as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
