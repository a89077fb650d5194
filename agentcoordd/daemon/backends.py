"""Backend selection (DESIGN.md "Backend selection and identity") and the pool
of open stores, one per distinct selection.

Order, first match wins:
1. explicit per-call flags: --state-root, --api-url, --etcd-endpoints, --backend
   (two of them is a usage error);
2. the caller's environment: AGENT_COORD_API_URL, AGENT_COORD_ETCD_ENDPOINTS,
   AGENT_COORD_STATE_ROOT (API URL + state root: HTTP wins, with a warning;
   likewise API URL + etcd endpoints, and etcd endpoints + state root: etcd),
   then the legacy AGENT_COORD_BACKEND (refused);
3. reads only (status, batch-audit, doctor): AGENT_COORD_STATUS_STATE_ROOT;
   then AGENT_COORD_API_TOKEN without an API URL is an error (exit 2), as in
   agent-coord;
4. AGENT_COORD_LOCAL=1|true|yes: the zero-config local root, on purpose;
5. the machine's configured backend: the consumer env files, then the
   daemon's own environment (a systemd EnvironmentFile, say);
6. the zero-config local root, with the spec's `local mode` notice.

As in agent-coord, AGENT_COORD_API_URL and AGENT_COORD_API_TOKEN count when
they are not empty (`" "` is a URL, an invalid one: exit 2); a blank
AGENT_COORD_STATE_ROOT (or AGENT_COORD_STATUS_STATE_ROOT) is ignored
(agent-coord would use a directory named " "). A read served by a local root
while a consumer env file configures AGENT_COORD_API_URL carries agent-coord's
read split-brain warning. Warnings are agent-coord's words.

etcd settings come from the same mapping as the endpoints that selected it
(the caller's environment for --etcd-endpoints): AGENT_COORD_ETCD_USER with
AGENT_COORD_ETCD_PASSWORD or AGENT_COORD_ETCD_PASSWORD_FILE (first line of the
file; the daemon reads it), AGENT_COORD_ETCD_CA_FILE (+ optional
AGENT_COORD_ETCD_CERT_FILE / AGENT_COORD_ETCD_KEY_FILE for client-certificate
auth) and AGENT_COORD_ETCD_PREFIX (a team's key prefix on a shared cluster).

A local root is private (directories 0700, files 0600) unless the same mapping
sets AGENT_COORD_STATE_MODE (an octal directory mode such as 0750 or 0770;
files get it without the execute bits): an operator's way to share a root.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentcoordd.daemon import envfiles
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.protocol import Selection, state_home
from agentcoordd.store.files import PRIVATE_DIR_MODE, fsync_dir, parse_mode

Kind = Literal["local", "http", "etcd"]
LOCAL_OPT_IN = frozenset({"1", "true", "yes"})
RUBY_STRIP = " \t\n\v\f\r\0"  # what Ruby's String#strip removes (ASCII only)
STATUS_STATE_ROOT_VAR = "AGENT_COORD_STATUS_STATE_ROOT"
LEGACY_REFUSAL = "legacy GitHub backend not supported; use --api-url or --etcd-endpoints"
LOCAL_NOTICE = "notice: local mode — single-machine only; state root: {root}"
# A write naming a local root that does not exist creates it (agent-coord does); said
# once, so a mistyped --state-root is not a silent claim into a new empty root.
NEW_ROOT_NOTICE = "notice: created new state root {root}"
# agent-coord's words (printed after "warning: ").
BOTH_SET_WARNING = (
    "AGENT_COORD_API_URL and AGENT_COORD_STATE_ROOT are both set; using the HTTP backend. "
    "Pass --state-root to force local."
)
FLAG_API_ENV_ROOT_WARNING = (
    "--api-url and AGENT_COORD_STATE_ROOT are both set; using the HTTP backend. "
    "Pass --state-root to force local."
)
FLAG_API_FLAG_ROOT_WARNING = "--api-url and --state-root are both set; using the local backend."
ENV_API_FLAG_ROOT_WARNING = (
    "AGENT_COORD_API_URL and --state-root are both set; using the local backend.")
ENV_ETCD_FLAG_ROOT_WARNING = (
    "AGENT_COORD_ETCD_ENDPOINTS and --state-root are both set; using the local backend.")
TOKEN_WITHOUT_URL = (
    "AGENT_COORD_API_TOKEN is set but AGENT_COORD_API_URL is missing or empty; "
    "set AGENT_COORD_API_URL or unset AGENT_COORD_API_TOKEN"
)
READ_SPLIT_BRAIN_WARNING = (
    "split-brain configuration: {path} configures AGENT_COORD_API_URL, but this CLI is using the "
    "local backend. Load that env file for fleet reads or remove it if local mode is intended."
)
INVALID_URL = "invalid HTTP backend URL: expected http(s) URL with host"
API_AND_ETCD_WARNING = (
    "both AGENT_COORD_API_URL and AGENT_COORD_ETCD_ENDPOINTS are set; using the HTTP backend "
    "(AGENT_COORD_API_URL). Unset one of them."
)
ETCD_AND_ROOT_WARNING = (
    "both AGENT_COORD_ETCD_ENDPOINTS and AGENT_COORD_STATE_ROOT are set; using etcd "
    "(AGENT_COORD_ETCD_ENDPOINTS). Pass --state-root only for an explicit local smoke check."
)
# etcd options other than credentials: env name -> EtcdStore keyword.
ETCD_FILE_OPTIONS = {
    "AGENT_COORD_ETCD_CA_FILE": "ca_file",
    "AGENT_COORD_ETCD_CERT_FILE": "cert_file",
    "AGENT_COORD_ETCD_KEY_FILE": "key_file",
}
ETCD_PREFIX_VAR = "AGENT_COORD_ETCD_PREFIX"
STATE_MODE_VAR = "AGENT_COORD_STATE_MODE"
PASSWORD_FILE_CAP = 4096

# kind -> (module, class, human name). A store module that does not exist yet
# makes that selection a clear exit 2 instead of a crash.
STORES: dict[str, tuple[str, str, str]] = {
    "local": ("agentcoordd.store.local", "LocalStore", "local state root"),
    "http": ("agentcoordd.store.http", "HttpStore", "HTTP state API"),
    "etcd": ("agentcoordd.store.etcd", "EtcdStore", "etcd"),
}


@dataclass(frozen=True)
class Resolved:
    kind: Kind
    location: str  # state root, API URL or endpoint list
    source: str  # where the selection came from, for messages and `daemon status`
    token: str | None = field(default=None, repr=False)
    user: str | None = None  # etcd RBAC user (its password travels as `token`)
    implicit: bool = False
    machine_id: str | None = None  # the machine's own id (env file / daemon env)
    notices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # Store keyword arguments, no secrets: etcd's CA/cert/key files and key_prefix,
    # a local root's `mode` (AGENT_COORD_STATE_MODE).
    options: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        """Pool key: selection + a hash of the token (the token itself is never kept)."""
        digest = hashlib.sha256(self.token.encode()).hexdigest()[:16] if self.token else ""
        location = self.location + "".join(f"|{k}={v}" for k, v in self.options)
        return (self.kind, location, f"{self.user or ''}:{digest}")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.location, "source": self.source,
                "credentials": bool(self.token), **dict(self.options)}


def _value(env: Mapping[str, str], name: str) -> str | None:
    """A value that counts only when not blank (state roots, etcd settings, ids)."""
    value = env.get(name)
    return value.strip() or None if isinstance(value, str) else None


def _set(env: Mapping[str, str], name: str) -> str | None:
    """A value that counts when not empty, as agent-coord reads AGENT_COORD_API_URL/_TOKEN."""
    value = env.get(name)
    return value if isinstance(value, str) and value else None


def local_opt_in(env: Mapping[str, str]) -> bool:
    """agent-coord's `local_mode_opt_in?`: 1, true or yes, ASCII-trimmed, case-insensitive."""
    return (env.get("AGENT_COORD_LOCAL") or "").strip(RUBY_STRIP).lower() in LOCAL_OPT_IN


def implicit_root(env: Mapping[str, str]) -> str:
    """$XDG_STATE_HOME/agent-coordination when absolute, else ~/.local/state/…"""
    return os.path.join(state_home(env), "agent-coordination")


def _absolute(path: str, cwd: str) -> str:
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(cwd or "/", path)
    return os.path.normpath(path)


def _etcd(endpoints: str, values: Mapping[str, str], source: str, cwd: str, machine: str | None,
          warnings: list[str]) -> Resolved:
    """An etcd selection with its credentials and options from the same mapping."""
    user = _value(values, "AGENT_COORD_ETCD_USER")
    password = _value(values, "AGENT_COORD_ETCD_PASSWORD")
    password_file = _value(values, "AGENT_COORD_ETCD_PASSWORD_FILE")
    if password and password_file:
        raise OperationalError(
            f"etcd configuration ({source}): both AGENT_COORD_ETCD_PASSWORD and "
            "AGENT_COORD_ETCD_PASSWORD_FILE are set; set only one")
    if password_file:
        password = _read_password_file(_absolute(password_file, cwd), source)
    if (user is None) != (password is None):
        missing = ("AGENT_COORD_ETCD_PASSWORD or AGENT_COORD_ETCD_PASSWORD_FILE" if password is None
                   else "AGENT_COORD_ETCD_USER")
        raise OperationalError(f"etcd configuration ({source}) is incomplete: {missing} is not set")
    options = [(keyword, _absolute(value, cwd)) for name, keyword in ETCD_FILE_OPTIONS.items()
               if (value := _value(values, name))]
    prefix = _value(values, ETCD_PREFIX_VAR)
    if prefix:
        options.append(("key_prefix", prefix))
    return Resolved("etcd", endpoints, source, password, user=user, machine_id=machine,
                    warnings=tuple(warnings), options=tuple(options))


def _read_password_file(path: str, source: str) -> str:
    """First line of the file, without its line ending; errors name the file, never its content."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(PASSWORD_FILE_CAP + 1)
    except OSError as exc:
        raise OperationalError(
            f"cannot read etcd password file {path} ({source}): {exc.strerror or exc}") from None
    if len(raw) > PASSWORD_FILE_CAP:
        raise OperationalError(f"etcd password file {path} ({source}) is larger than {PASSWORD_FILE_CAP} bytes")
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise OperationalError(f"etcd password file {path} ({source}) is not UTF-8 text") from None
    password = lines[0] if lines else ""
    if not password:
        raise OperationalError(f"etcd password file {path} ({source}) is empty")
    return password


def _local(root: str, values: Mapping[str, str], source: str, cwd: str, machine: str | None,
           warnings: list[str], *, callers: bool) -> Resolved:
    """A local selection; its AGENT_COORD_STATE_MODE comes from the same mapping."""
    options: tuple[tuple[str, str], ...] = ()
    mode = _value(values, STATE_MODE_VAR)
    if mode:
        try:
            options = (("mode", f"{parse_mode(mode):04o}"),)
        except ValueError as exc:
            error = UsageError if callers else OperationalError
            raise error(f"invalid {STATE_MODE_VAR} ({source}): {exc}") from None
    return Resolved("local", _absolute(root, cwd), source, machine_id=machine,
                    warnings=tuple(warnings), options=options)


def _from_values(values: Mapping[str, str], source: str, cwd: str, machine: str | None,
                 warnings: list[str]) -> Resolved | None:
    """API URL, etcd endpoints or state root from one mapping (env / env file)."""
    api = _set(values, "AGENT_COORD_API_URL")
    etcd = _value(values, "AGENT_COORD_ETCD_ENDPOINTS")
    root = _value(values, "AGENT_COORD_STATE_ROOT")
    if api:
        if root:
            warnings.append(BOTH_SET_WARNING)
        if etcd:
            warnings.append(API_AND_ETCD_WARNING)
        return Resolved("http", api.rstrip("/"), source, _set(values, "AGENT_COORD_API_TOKEN"),
                        machine_id=machine, warnings=tuple(warnings))
    if etcd:
        if root:
            warnings.append(ETCD_AND_ROOT_WARNING)
        return _etcd(etcd, values, source, cwd, machine, warnings)
    if root:
        return _local(root, values, source, cwd, machine, warnings,
                      callers=source == "environment")
    return None


def _overridden_by_state_root(selection: Selection, env: Mapping[str, str]) -> list[str]:
    """agent-coord's warning when --state-root overrides another configured backend."""
    if selection.api_url:
        return [FLAG_API_FLAG_ROOT_WARNING]
    if _set(env, "AGENT_COORD_API_URL"):
        return [ENV_API_FLAG_ROOT_WARNING]
    if _value(env, "AGENT_COORD_ETCD_ENDPOINTS"):
        return [ENV_ETCD_FLAG_ROOT_WARNING]
    return []


def resolve(selection: Selection, env: Mapping[str, str], cwd: str = "",
            daemon_env: Mapping[str, str] | None = None, *, write: bool = False,
            status_read: bool = False) -> Resolved:
    """Pick the backend for one call. Raises UsageError / OperationalError.

    `status_read`: agent-coord's status-style reads (status, batch-audit,
    doctor), which honour AGENT_COORD_STATUS_STATE_ROOT and warn when a local
    root serves them while an env file configures the fleet API URL.
    """
    files = envfiles.existing(env, cwd)
    resolved = _resolve(selection, env, cwd, daemon_env, files, write=write, status_read=status_read)
    if status_read and resolved.kind == "local" and not local_opt_in(env) \
            and not _set(env, "AGENT_COORD_API_URL"):
        path = envfiles.configuring_api_url(files)
        if path is not None:
            warning = READ_SPLIT_BRAIN_WARNING.format(path=path)
            resolved = dataclasses.replace(resolved, warnings=(*resolved.warnings, warning))
    if write and resolved.kind == "local" and not resolved.implicit:
        resolved = _created_root(resolved)
    return resolved


def _created_root(resolved: Resolved) -> Resolved:
    """Create a named local root that does not exist yet, with NEW_ROOT_NOTICE. One the
    daemon cannot create is left to the store's first write, which says why."""
    if os.path.lexists(resolved.location):
        return resolved
    mode = int(dict(resolved.options).get("mode", f"{PRIVATE_DIR_MODE:o}"), 8)
    try:
        os.makedirs(resolved.location, mode=mode)
    except OSError:  # raced another writer (it exists now), or not creatable
        return resolved
    with contextlib.suppress(OSError):
        fsync_dir(os.path.dirname(resolved.location))
    return dataclasses.replace(
        resolved, notices=(*resolved.notices, NEW_ROOT_NOTICE.format(root=resolved.location)))


def own_machine_id(daemon_env: Mapping[str, str], files: list[envfiles.EnvFile]) -> str | None:
    """The machine's own AGENT_COORD_MACHINE_ID: the daemon's environment, else the env files'."""
    return _value(daemon_env, "AGENT_COORD_MACHINE_ID") or next(
        (f.get("AGENT_COORD_MACHINE_ID") for f in files
         if f.error is None and f.get("AGENT_COORD_MACHINE_ID")), None)


def _resolve(selection: Selection, env: Mapping[str, str], cwd: str,
             daemon_env: Mapping[str, str] | None, files: list[envfiles.EnvFile], *,
             write: bool, status_read: bool) -> Resolved:
    daemon_env = os.environ if daemon_env is None else daemon_env
    machine = own_machine_id(daemon_env, files)
    warnings: list[str] = []

    # 1. explicit flags
    explicit = {
        "--state-root": selection.state_root,
        "--api-url": selection.api_url,
        "--etcd-endpoints": selection.etcd_endpoints,
        "--backend": selection.backend,
    }
    chosen = [(flag, value) for flag, value in explicit.items() if value]
    if [flag for flag, _ in chosen] == ["--state-root", "--api-url"]:
        # agent-coord's rule for exactly this pair: the local root wins, with a warning
        # (the etcd flag is ours; combined with anything it stays a usage error).
        chosen = chosen[:1]
    elif len(chosen) > 1:
        raise UsageError(
            "choose one backend: " + " and ".join(flag for flag, _ in chosen)
            + " were both given; pass exactly one of --state-root, --api-url or --etcd-endpoints"
        )
    if chosen:
        flag, value = chosen[0]
        assert value is not None
        if flag == "--state-root":
            warnings.extend(_overridden_by_state_root(selection, env))
            return _local(value, env, flag, cwd, machine, warnings, callers=True)
        if flag == "--api-url":
            if _value(env, "AGENT_COORD_STATE_ROOT"):
                warnings.append(FLAG_API_ENV_ROOT_WARNING)
            return Resolved("http", value.rstrip("/"), flag, _set(env, "AGENT_COORD_API_TOKEN"),
                            machine_id=machine, warnings=tuple(warnings))
        if flag == "--etcd-endpoints":
            return _etcd(value, env, flag, cwd, machine, [])
        raise OperationalError(LEGACY_REFUSAL)

    # 2. the caller's environment
    found = _from_values(env, "environment", cwd, machine, warnings)
    if found is not None:
        return found
    if _value(env, "AGENT_COORD_BACKEND"):
        raise OperationalError(LEGACY_REFUSAL)

    # 3. a read-only status root; a token without its URL
    status_root = _value(env, STATUS_STATE_ROOT_VAR) if status_read else None
    if status_root:
        return _local(status_root, env, STATUS_STATE_ROOT_VAR, cwd, machine, warnings, callers=True)
    if _set(env, "AGENT_COORD_API_TOKEN"):
        raise OperationalError(TOKEN_WITHOUT_URL)

    # 4. explicit opt-in to the zero-config root
    if local_opt_in(env):
        return _implicit(env, machine, warnings)

    # 5. the machine's configured backend
    for loaded in files:
        if loaded.error is not None:
            message = (
                f"cannot use consumer env file {loaded.path}: {loaded.error}; fix or remove it, "
                "or choose a backend explicitly (--state-root PATH, AGENT_COORD_STATE_ROOT, "
                "or AGENT_COORD_LOCAL=1)"
            )
            if write:
                raise OperationalError(message)
            warnings.append(message)
            continue
        found = _from_values(loaded.values, f"env file {loaded.path}", cwd, machine, warnings)
        if found is not None:
            return found
    found = _from_values(daemon_env, "daemon environment", cwd, machine, warnings)
    if found is not None:
        return found

    # 6. zero-config
    return _implicit(env, machine, warnings)


def _implicit(env: Mapping[str, str], machine: str | None, warnings: list[str]) -> Resolved:
    root = implicit_root(env)
    return Resolved("local", root, "implicit", implicit=True, machine_id=machine,
                    notices=(LOCAL_NOTICE.format(root=root),), warnings=tuple(warnings))


def _open_etcd(cls: Any, resolved: Resolved) -> Any:
    endpoints = [e.strip() for e in resolved.location.split(",") if e.strip()]
    options = dict(resolved.options)
    try:
        return cls(endpoints, user=resolved.user, password=resolved.token, **options)
    except UsageError as exc:
        # A bad flag value is the caller's usage error; a bad machine configuration is not.
        error = UsageError if resolved.source.startswith("--") else OperationalError
        raise error(f"invalid etcd configuration ({resolved.source}): {exc.message}") from None
    except OSError as exc:  # ssl.SSLError included: unreadable or invalid TLS files
        files = ", ".join(options[k] for k in ("ca_file", "cert_file", "key_file") if k in options)
        raise OperationalError(
            f"cannot load etcd TLS files {files} ({resolved.source}): {exc.strerror or exc}") from None


def _open_http(cls: Any, resolved: Resolved) -> Any:
    """agent-coord's answer to a URL that is not http(s)://HOST: exit 2, its words first."""
    import httpx  # already loaded with the HTTP store

    try:
        return cls(resolved.location, resolved.token or "")
    except (UsageError, ValueError, httpx.InvalidURL):
        hint = ""
        if resolved.source.startswith("env file "):
            hint = (f"; fix AGENT_COORD_API_URL in {resolved.source[len('env file '):]}, pass "
                    "--state-root PATH to choose a local root explicitly, or set AGENT_COORD_LOCAL=1 "
                    "to opt into local mode")
        raise OperationalError(
            f"{INVALID_URL}: {resolved.location!r} ({resolved.source}){hint}") from None


class StorePool:
    """One open Store per distinct selection (+ token hash)."""

    def __init__(self, metrics: Any = None) -> None:
        self._stores: dict[tuple[str, str, str], Any] = {}
        self._metrics = metrics  # daemon.metrics: times every store it hands out
        self._described: dict[tuple[str, str, str], dict[str, Any]] = {}

    def get(self, resolved: Resolved) -> Any:
        key = resolved.key
        store = self._stores.get(key)
        if store is None:
            store = self._open(resolved)
            if self._metrics is not None:
                store = self._metrics.wrap(store, resolved.kind)
            self._stores[key] = store
            self._described[key] = resolved.describe()
        return store

    def _open(self, resolved: Resolved) -> Any:
        module_name, class_name, human = STORES[resolved.kind]
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            raise OperationalError(
                f"backend not available yet: the {human} store ({resolved.kind}, selected by "
                f"{resolved.source}) is not part of this agentcoord build; pass --state-root PATH "
                "or set AGENT_COORD_LOCAL=1 to use local state"
            ) from None
        if resolved.kind == "local":
            if resolved.implicit:
                os.makedirs(resolved.location, mode=0o700, exist_ok=True)
            from agentcoordd.store.cache import CachingStore

            options = dict(resolved.options)
            mode = {"mode": int(options["mode"], 8)} if "mode" in options else {}
            # The daemon is long-lived: keep parsed records, re-read only what changed.
            return CachingStore(cls(resolved.location, **mode))
        if resolved.kind == "etcd":
            return _open_etcd(cls, resolved)
        return _open_http(cls, resolved)

    def describe(self) -> list[dict[str, Any]]:
        """The open backends (`daemon status`), with a remote one's clock as last measured."""
        out = []
        for key, described in self._described.items():
            row = dict(described)
            clock = self._stores[key].capabilities.clock if key in self._stores else None
            if clock is not None:
                offset = clock.offset()
                row["clock_offset_seconds"] = None if offset is None else round(offset.seconds, 3)
            out.append(row)
        return out

    def clocks(self) -> list[tuple[str, str, Any]]:
        """(kind, location, offset or None) of every open backend with a clock of its own."""
        return [(self._described[key]["kind"], self._described[key]["location"], store.capabilities.clock.offset())
                for key, store in self._stores.items() if store.capabilities.clock is not None]

    async def aclose(self) -> None:
        for store in self._stores.values():
            try:
                await store.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort at shutdown
                pass
        self._stores.clear()
