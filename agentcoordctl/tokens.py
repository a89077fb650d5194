"""token provision | revoke: machine credentials, client-side (no daemon).

HTTP backend (default): runs `wrangler d1 execute` through
`agentcoordd.tokens` against the deployed D1 database (`--database NAME`,
default `agent-coord`) or the local dev one (`--local`). The token is printed
once on stdout; D1 keeps only its SHA-256.

etcd (`--etcd`): creates the machine's etcd user and role with the same scope
semantics (`agentcoordd.store.etcd_admin`), as the cluster's root user
(AGENT_COORD_ETCD_USER, default `root`, with AGENT_COORD_ETCD_PASSWORD or
AGENT_COORD_ETCD_PASSWORD_FILE / `--password-file`). The generated password is
printed once. Every write prefix also gets its `archive/` mirror, so `gc` can
archive what the machine writes.

Everything heavy (subprocess, anyio, httpx) is imported inside the functions.
"""

from __future__ import annotations

from agentcoordctl import spec
from agentcoordctl.options import Globals, eprint, fail
from agentcoordctl.spec import Arg, Exit, Opt

MACHINE = Arg("machine", "MACHINE", "Machine name: letters, digits, '.', '_', ':', '-'.")
D1 = (
    Opt("--local", "local", "flag", help="The local `wrangler dev` D1 database."),
    Opt("--database", "database", metavar="NAME",
        help="The remote D1 database (default: agent-coord)."),
    Opt("--persist-to", "persist_to", metavar="DIR",
        help="With --local: wrangler's local persistence directory."),
    Opt("--worker-dir", "worker_dir", metavar="DIR",
        help="The Worker project with wrangler.toml (default: $AGENT_COORD_WORKER_DIR, ./worker, "
        "or this checkout's)."),
)
ETCD = (
    Opt("--etcd", "etcd", "flag", panel="etcd", help="An etcd user/role instead of a Worker token."),
    Opt("--etcd-endpoints", "etcd_endpoints", metavar="URLS", panel="etcd",
        help="With --etcd (default: $AGENT_COORD_ETCD_ENDPOINTS)."),
    Opt("--password-file", "password_file", metavar="PATH", panel="etcd",
        help="With --etcd: the root password's file (default: $AGENT_COORD_ETCD_PASSWORD[_FILE])."),
)
KEY_PREFIX = Opt("--key-prefix", "key_prefix", metavar="PREFIX", panel="etcd",
                 help="With --etcd: the team's key prefix (default: $AGENT_COORD_ETCD_PREFIX).")


def provision(*, machine: str, read_prefix: list[str] | None, write_prefix: list[str] | None,
              all_state: bool, rotate: bool, local: bool, database: str | None,
              persist_to: str | None, worker_dir: str | None, etcd: bool,
              etcd_endpoints: str | None, password_file: str | None,
              key_prefix: str | None) -> None:
    from agentcoordd import tokens
    from agentcoordd.model.errors import CoordError

    reads, writes = list(read_prefix or []), list(write_prefix or [])
    try:
        tokens.machine_name(machine)
        if etcd:
            _refuse_d1_flags(local, database, persist_to)
            secret = _etcd_provision(machine, reads, writes, all_state=all_state, rotate=rotate,
                                     endpoints=etcd_endpoints, password_file=password_file,
                                     key_prefix=key_prefix)
            what = "etcd password"
            env = "AGENT_COORD_ETCD_USER={machine} and AGENT_COORD_ETCD_PASSWORD".format(machine=machine)
        else:
            _refuse_etcd_flags(etcd_endpoints, password_file, key_prefix)
            grant = tokens.build_provision(machine, read_prefixes=reads, write_prefixes=writes,
                                           all_state=all_state, rotate=rotate)
            tokens.execute(grant.sql, **_d1_target(local, database, persist_to, worker_dir))
            secret, what, env = grant.token, "token", "AGENT_COORD_API_TOKEN"
            reads, writes = grant.read_prefixes, grant.write_prefixes
    except CoordError as exc:
        raise fail(exc.message, exc.exit_code) from None
    print(secret, flush=True)
    eprint(f"{'rotated' if rotate else 'provisioned'} {machine}: read {_scopes(reads, all_state)}, "
           f"write {_scopes(writes, all_state)}")
    eprint(f"this {what} is shown once: put it in {machine}'s private env file as {env}")
    raise Exit(0)


def revoke(*, machine: str, local: bool, database: str | None, persist_to: str | None,
           worker_dir: str | None, etcd: bool, etcd_endpoints: str | None,
           password_file: str | None) -> None:
    from agentcoordd import tokens
    from agentcoordd.model.errors import CoordError

    try:
        tokens.machine_name(machine)
        if etcd:
            _refuse_d1_flags(local, database, persist_to)
            _etcd_revoke(machine, endpoints=etcd_endpoints, password_file=password_file)
        else:
            _refuse_etcd_flags(etcd_endpoints, password_file, None)
            tokens.execute(tokens.build_revoke(machine), **_d1_target(local, database, persist_to, worker_dir))
    except CoordError as exc:
        raise fail(exc.message, exc.exit_code) from None
    eprint(f"revoked: {machine}")
    raise Exit(0)


# ---- helpers ------------------------------------------------------------------------------


def _scopes(scopes: list[str], all_state: bool) -> str:
    if all_state:
        return "all state"
    return ", ".join(scopes) if scopes else "nothing"


def _d1_target(local: bool, database: str | None, persist_to: str | None,
               worker_dir: str | None) -> dict[str, object]:
    from agentcoordd import tokens
    from agentcoordd.model.errors import UsageError

    if local and database is not None:
        raise UsageError("choose one of --local or --database NAME")
    if persist_to is not None and not local:
        raise UsageError("--persist-to only applies with --local")
    name = tokens.database_name(database if database is not None else tokens.DEFAULT_DATABASE)
    return dict(database=name, local=local, persist_to=persist_to,
                worker_dir=tokens.find_worker_dir(worker_dir))


def _refuse_d1_flags(local: bool, database: str | None, persist_to: str | None) -> None:
    from agentcoordd.model.errors import UsageError

    used = [flag for flag, on in (("--local", local), ("--database", database is not None),
                                  ("--persist-to", persist_to is not None)) if on]
    if used:
        raise UsageError(f"{', '.join(used)} cannot be combined with --etcd (D1 options)")


def _refuse_etcd_flags(endpoints: str | None, password_file: str | None,
                       key_prefix: str | None) -> None:
    from agentcoordd.model.errors import UsageError

    used = [flag for flag, value in (("--etcd-endpoints", endpoints),
                                     ("--password-file", password_file),
                                     ("--key-prefix", key_prefix)) if value is not None]
    if used:
        raise UsageError(f"{', '.join(used)} only apply with --etcd")


def _directory(scope: str) -> str:
    return scope[:-1] if scope.endswith("/") and not scope.endswith("//") else scope


def etcd_scopes(reads: list[str], writes: list[str], *, all_state: bool) -> tuple[list[str], list[str]]:
    """Validated etcd scopes: HTTP token grammar; write prefixes gain their archive/ mirror."""
    from agentcoordd import tokens
    from agentcoordd.model.errors import UsageError

    if all_state and (reads or writes):
        raise UsageError("--all-state cannot be combined with --read-prefix/--write-prefix")
    if not all_state and not (reads or writes):
        raise UsageError("give at least one --read-prefix or --write-prefix, or --all-state")
    if all_state:
        return [], ["*"]
    # docs/etcd.md writes a directory scope as etcd shows a prefix, `claims/acme/`: the same scope.
    reads = [_directory(scope) for scope in reads]
    writes = [_directory(scope) for scope in writes]
    for scope in reads + writes:
        if not tokens.valid_scope(scope):
            raise UsageError(
                f"invalid scope prefix: {scope!r} (a state directory such as claims/OWNER/REPO "
                "or a record path such as heartbeats/ID.json; use --all-state for everything)"
            )
    mirrored = list(writes)
    for scope in writes:
        if scope != "archive" and not scope.startswith("archive/") and f"archive/{scope}" not in mirrored:
            mirrored.append(f"archive/{scope}")
    return list(dict.fromkeys(reads)), list(dict.fromkeys(mirrored))


def _etcd_admin_settings(endpoints: str | None, password_file: str | None) -> dict[str, object]:
    """Endpoints, root credentials and TLS files from flags and the caller's environment."""
    import os

    from agentcoordd.model.errors import UsageError

    env = os.environ
    urls = endpoints or (env.get("AGENT_COORD_ETCD_ENDPOINTS") or "").strip()
    if not urls:
        raise UsageError("--etcd needs the cluster: pass --etcd-endpoints URLS or set "
                         "AGENT_COORD_ETCD_ENDPOINTS")
    user = (env.get("AGENT_COORD_ETCD_USER") or "").strip() or "root"
    password = env.get("AGENT_COORD_ETCD_PASSWORD") or None
    file = password_file or (env.get("AGENT_COORD_ETCD_PASSWORD_FILE") or "").strip() or None
    if password and file:
        raise UsageError("both AGENT_COORD_ETCD_PASSWORD and a password file are given; use one")
    if file:
        password = _read_password_file(file)
    if not password:
        raise UsageError(f"--etcd needs the password of etcd user {user!r}: set "
                         "AGENT_COORD_ETCD_PASSWORD or pass --password-file PATH")
    settings: dict[str, object] = {
        "endpoints": [u.strip() for u in urls.split(",") if u.strip()],
        "user": user, "password": password,
        "timeout": Globals.timeout or 10.0,
    }
    for name, keyword in (("AGENT_COORD_ETCD_CA_FILE", "ca_file"),
                          ("AGENT_COORD_ETCD_CERT_FILE", "cert_file"),
                          ("AGENT_COORD_ETCD_KEY_FILE", "key_file")):
        if (value := (env.get(name) or "").strip()):
            settings[keyword] = value
    return settings


def _read_password_file(path: str) -> str:
    from agentcoordd.model.errors import OperationalError

    try:
        with open(path, "rb") as handle:
            raw = handle.read(4097)
    except OSError as exc:
        raise OperationalError(f"cannot read password file {path}: {exc.strerror or exc}") from None
    try:
        lines = raw[:4096].decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise OperationalError(f"password file {path} is not UTF-8 text") from None
    if len(raw) > 4096 or not lines or not lines[0]:
        raise OperationalError(f"password file {path} is empty or larger than 4096 bytes")
    return lines[0]


def _etcd_provision(machine: str, reads: list[str], writes: list[str], *, all_state: bool,
                    rotate: bool, endpoints: str | None, password_file: str | None,
                    key_prefix: str | None) -> str:
    import os
    import secrets

    import anyio

    from agentcoordd.model.errors import UsageError
    from agentcoordd.store.etcd_admin import EtcdAdmin

    read_scopes, write_scopes = etcd_scopes(reads, writes, all_state=all_state)
    settings = _etcd_admin_settings(endpoints, password_file)
    prefix = key_prefix if key_prefix is not None else (os.environ.get("AGENT_COORD_ETCD_PREFIX") or "")
    password = secrets.token_urlsafe(24)

    async def run() -> None:
        async with EtcdAdmin(**settings) as admin:  # type: ignore[arg-type]
            if not rotate and await admin.user_exists(machine):
                raise UsageError(f"etcd user {machine!r} already exists: pass --rotate to re-key it")
            await admin.provision(machine, password, read=read_scopes, write=write_scopes,
                                  key_prefix=prefix.strip())

    anyio.run(run)
    if not all_state:
        reads[:], writes[:] = read_scopes, write_scopes
    return password


def _etcd_revoke(machine: str, *, endpoints: str | None, password_file: str | None) -> None:
    import anyio

    from agentcoordd.store.etcd_admin import EtcdAdmin

    settings = _etcd_admin_settings(endpoints, password_file)

    async def run() -> None:
        async with EtcdAdmin(**settings) as admin:  # type: ignore[arg-type]
            await admin.deprovision(machine)

    anyio.run(run)



COMMANDS = (
    spec.Command(
        ("token", "provision"), "Create (or --rotate) MACHINE's credentials; the secret is printed "
        "once on stdout.",
        (MACHINE,
         Opt("--read-prefix", "read_prefix", "many", metavar="PREFIX",
             help="Readable directory or record path (repeatable)."),
         Opt("--write-prefix", "write_prefix", "many", metavar="PREFIX",
             help="Writable directory or record path (repeatable)."),
         Opt("--all-state", "all_state", "flag", help="Everything (trusted operator machines only)."),
         Opt("--rotate", "rotate", "flag", help="Re-key an existing machine (or create it)."),
         *D1, *ETCD, KEY_PREFIX),
        provision),
    spec.Command(
        ("token", "revoke"), "Revoke MACHINE's token (or, with --etcd, delete its user and role).",
        (MACHINE, *D1, *ETCD), revoke),
)
