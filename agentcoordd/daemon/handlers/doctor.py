"""doctor: gather the facts coord/doctor.py checks against, run it, and add the
daemon section (ours, beyond the spec).

Facts gathered here (coord never touches the environment or the filesystem):
* the backend selection — resolved exactly as every other command resolves it
  (backends.resolve), except that a failed selection (the refused legacy
  GitHub backend, an unusable etcd configuration, an invalid API URL) becomes
  a *reported* failure instead of an error reply;
* for a local root: whether it exists and is a directory; the zero-config root
  is created on a first run (never under --stack-json, which is read-only and
  requires an explicit selector anyway);
* split-brain: see `split_brain_env_file`;
* the consumer env files (an unreadable or unparsable one fails the doctor);
* the caller's identity.

The daemon section: socket, pid, versions (client/daemon mismatch flagged),
uptime, keep-alive lanes (count, failing), the event outbox depth, service
manager units and state, and the machine's configured backend with the env
file it came from.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.coord import doctor as checks
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon import backends, envfiles
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import CoordError, OperationalError, UsageError
from agentcoordd.model.identity import Identity, resolve_identity

STACK_SELECTOR_ERROR = (
    "doctor --stack-json requires exactly one of --state-root, --api-url, --etcd-endpoints, "
    "or --backend"
)
# Leave time to build and send the report when the backend hangs.
REPORT_MARGIN = 1.0
SERVICE_QUERY_TIMEOUT = 3.0
SYSTEMD_UNITS = ("agentcoordd.socket", "agentcoordd.service")
LAUNCHD_LABEL = "dev.agentcoord.agentcoordd"
# What decides the machine's configured backend: where the env files are, never
# the caller's own backend selection.
_MACHINE_ENV = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "AGENT_COORD_ENV_FILE")


def _usage(stack: bool, message: str) -> p.Response:
    return p.Response(exit_code=p.EXIT_STACK_USAGE if stack else p.EXIT_USAGE, error=message)


async def handle(request: p.Doctor, svc: Services, call: Call) -> p.Response:
    env = dict(request.caller.env)
    cwd = request.caller.cwd
    selection = request.selection
    stack = request.stack
    given = [v for v in (selection.state_root, selection.api_url, selection.etcd_endpoints,
                         selection.backend) if v]
    if stack and len(given) != 1:
        return _usage(stack, STACK_SELECTOR_ERROR)
    try:
        for prefix in request.prefixes:
            checks.check_prefix(prefix)
    except UsageError as exc:
        return _usage(stack, exc.message)

    notices: list[str] = []
    warnings: list[str] = []
    facts, resolved = _resolve(selection, env, cwd, stack, notices, warnings)
    store = None
    if facts.error is None and resolved is not None:
        try:
            store = svc.pool.get(resolved)
        except CoordError as exc:
            facts = _replace(facts, error=exc.message)
    identity, identity_error = _identity(env, resolved)
    if identity_error:
        facts = _replace(facts, identity_error=identity_error)

    budget = None
    if request.timeout is not None and request.timeout > REPORT_MARGIN * 2:
        budget = request.timeout - REPORT_MARGIN - 0.5
    ctx = Ctx(store=store, clock=svc.clock, identity=identity,  # type: ignore[arg-type]
              lease=svc.leases.policy)
    report = await checks.doctor(ctx, facts, deep=request.deep, prefixes=list(request.prefixes),
                                 client_version=request.client_version, budget=budget)
    warnings.extend(ctx.warnings)
    if facts.initialized:
        notices.append(f"notice: initialized the zero-config state root {facts.location}")
    payload = {
        "report": checks.legacy_report(report),
        "stack": checks.stack_report(report, daemon_version=p.DAEMON_VERSION),
        "daemon": await daemon_section(svc, request, env),
    }
    # A bad notification setting is one line in every doctor mode (it never fails it).
    warnings.extend(f"notification configuration: {error}"
                    for error in svc.notifier.current().errors)
    exit_code = (checks.stack_exit(payload["stack"]) if stack else checks.legacy_exit(report))
    return p.Response(exit_code=exit_code, payload=payload, warnings=warnings, notices=notices)


def _replace(facts: checks.BackendFacts, **changes: Any) -> checks.BackendFacts:
    import dataclasses

    return dataclasses.replace(facts, **changes)


def _identity(env: Mapping[str, str], resolved: backends.Resolved | None) -> tuple[Identity, str | None]:
    fallback = resolved.machine_id if resolved is not None else None
    try:
        return resolve_identity(env, fallback_machine=fallback), None
    except UsageError as exc:
        return Identity(), exc.message


def _legacy_repo(selection: p.Selection, env: Mapping[str, str]) -> str | None:
    if selection.backend:
        return selection.backend
    if any((selection.state_root, selection.api_url, selection.etcd_endpoints)):
        return None
    value = (env.get("AGENT_COORD_BACKEND") or "").strip()
    return value or None


def _resolve(selection: p.Selection, env: dict[str, str], cwd: str, stack: bool,
             notices: list[str], warnings: list[str]
             ) -> tuple[checks.BackendFacts, backends.Resolved | None]:
    files = envfiles.existing(env, cwd)
    file_errors = tuple((f.path, f.error) for f in files if f.error is not None)
    try:
        # doctor is one of agent-coord's status-style reads (AGENT_COORD_STATUS_STATE_ROOT);
        # --stack-json has exactly one explicit selector and never warns about split brain.
        resolved = backends.resolve(selection, env, cwd, write=False, status_read=not stack)
    except OperationalError as exc:
        repo = _legacy_repo(selection, env)
        if repo is not None:
            return checks.BackendFacts("github", repo, "--backend" if selection.backend else
                                       "environment", error=exc.message), None
        kind, location = "unknown", None
        if selection.etcd_endpoints or (env.get("AGENT_COORD_ETCD_ENDPOINTS") or "").strip():
            kind, location = "etcd", selection.etcd_endpoints or env["AGENT_COORD_ETCD_ENDPOINTS"]
        return checks.BackendFacts(kind, location, error=exc.message), None
    notices.extend(resolved.notices)
    # Unusable env files are reported by the doctor itself (env_file_errors), not as warnings.
    warnings.extend(w for w in resolved.warnings if not w.startswith("cannot use consumer env file"))
    # An unusable env file fails the doctor exactly when it fails writes: when
    # this selection fell through to the machine's configuration (not an
    # explicit flag, the caller's environment or the AGENT_COORD_LOCAL opt-in).
    consulted = not (resolved.source.startswith("--")
                     or resolved.source in ("environment", backends.STATUS_STATE_ROOT_VAR)
                     or (resolved.implicit and backends.local_opt_in(env)))
    if not consulted:
        warnings.extend(f"consumer env file {path} cannot be used: {reason}"
                        for path, reason in file_errors)
        file_errors = ()
    facts = checks.BackendFacts(resolved.kind, resolved.location, resolved.source,
                                implicit=resolved.implicit, env_file_errors=file_errors)
    if resolved.kind == "local":
        facts = _local_root(facts, create=resolved.implicit and not stack)
    if resolved.implicit and not backends.local_opt_in(env):
        split_brain = split_brain_env_file(files)
        facts = _replace(facts, split_brain_env_file=split_brain)
        if split_brain is not None:  # reported as status: split_brain; not said twice (agent-coord)
            warnings[:] = [w for w in warnings if not w.startswith("split-brain configuration:")]
    return facts, resolved


def _local_root(facts: checks.BackendFacts, *, create: bool) -> checks.BackendFacts:
    root = facts.location or ""
    initialized = False
    if create and not os.path.lexists(root):
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
            initialized = True
        except OSError as exc:
            return _replace(facts, root_state="unreadable",
                            root_error=f"cannot create it: {exc.strerror or exc}")
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return _replace(facts, root_state="missing")
    except OSError as exc:
        return _replace(facts, root_state="unreadable", root_error=exc.strerror or str(exc))
    import stat

    if not stat.S_ISDIR(st.st_mode):
        return _replace(facts, root_state="not_a_directory")
    if not os.access(root, os.R_OK | os.X_OK):  # the daemon runs as the caller's user
        return _replace(facts, root_state="unreadable", root_error="Permission denied")
    return _replace(facts, root_state="ok", initialized=initialized)


def split_brain_env_file(files: list[envfiles.EnvFile]) -> str | None:
    """The env file that configures an API URL the daemon could not use.

    The daemon routes implicit calls to the backend the env files configure
    (docs/compat.md#doctor-split-brain), so resolving to the implicit local root *while* an env
    file configures AGENT_COORD_API_URL only happens when that file cannot be
    used: it exists and, read as agent-coord reads it (the lines before its
    first non-UTF-8 one), configures the API URL. That is the spec's split
    brain: this machine's fleet configuration is there, calls land locally.
    """
    return envfiles.configuring_api_url(files)


# ---- the daemon section ----------------------------------------------------------


async def daemon_section(svc: Services, request: p.Doctor, env: Mapping[str, str]) -> dict[str, Any]:
    described = svc.server.describe()
    client_version = request.client_version or None
    return {
        "socket": described.get("socket"),
        "pid": described.get("pid"),
        "daemon_version": p.DAEMON_VERSION,
        "client_version": client_version,
        "version_mismatch": bool(client_version and client_version != p.DAEMON_VERSION),
        "protocol": p.PROTOCOL_VERSION,
        "uptime_seconds": described.get("uptime_seconds"),
        "state_dir": described.get("state_dir"),
        "lanes": svc.keeper.health(),
        "outbox": outbox_summary(svc, described.get("state_dir") or ""),
        "notifications": notifications_summary(svc),
        "service": await service_summary(env),
        "configured_backend": configured_backend(env, request.caller.cwd),
        "env_files": env_files(env, request.caller.cwd),
    }


def outbox_summary(svc: Services, state_dir: str) -> dict[str, Any]:
    try:
        return svc.outbox.summary()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, never crashes
        return {"path": os.path.join(state_dir, "outbox.jsonl"), "depth": None, "error": str(exc)}


def notifications_summary(svc: Services) -> dict[str, Any]:
    try:
        return svc.notifier.summary()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, never crashes
        return {**svc.notifier.settings.describe(), "depth": None, "error": str(exc)}


def _unit_files(home: str, config_home: str | None) -> tuple[str | None, list[str]]:
    """Where `service install` writes them: $XDG_CONFIG_HOME/systemd/user when that is
    an absolute path, else ~/.config/systemd/user (the XDG rule)."""
    config = config_home if config_home and os.path.isabs(config_home) else os.path.join(home, ".config")
    systemd_dir = os.path.join(config, "systemd", "user")
    systemd = [os.path.join(systemd_dir, u) for u in SYSTEMD_UNITS
               if os.path.exists(os.path.join(systemd_dir, u))]
    if systemd:
        return "systemd", systemd
    plist = os.path.join(home, "Library", "LaunchAgents", f"{LAUNCHD_LABEL}.plist")
    if os.path.exists(plist):
        return "launchd", [plist]
    return None, []


async def service_summary(env: Mapping[str, str]) -> dict[str, Any]:
    home = env.get("HOME") or os.path.expanduser("~")
    manager, units = _unit_files(home, env.get("XDG_CONFIG_HOME"))
    started_by = ("systemd" if os.environ.get("INVOCATION_ID") or os.environ.get("NOTIFY_SOCKET")
                  else "launchd" if os.environ.get("XPC_SERVICE_NAME") else "manual")
    out: dict[str, Any] = {"installed": bool(units), "manager": manager, "unit_files": units,
                           "started_by": started_by, "state": None}
    if manager == "systemd" and shutil.which("systemctl"):
        out["state"] = await _query(["systemctl", "--user", "is-active", *SYSTEMD_UNITS])
    elif manager == "launchd" and sys.platform == "darwin" and shutil.which("launchctl"):
        code = await _query(["launchctl", "print", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"],
                            status_only=True)
        out["state"] = code
    return out


async def _query(command: list[str], *, status_only: bool = False) -> str | None:
    try:
        with anyio.fail_after(SERVICE_QUERY_TIMEOUT):
            done = await anyio.run_process(command, check=False)
    except (OSError, TimeoutError) as exc:
        return f"unknown ({exc.__class__.__name__})"
    if status_only:
        return "loaded" if done.returncode == 0 else "not loaded"
    text = done.stdout.decode("utf-8", "replace").split()
    return ",".join(f"{unit}={state}" for unit, state in zip(SYSTEMD_UNITS, text)) or None


def configured_backend(env: Mapping[str, str], cwd: str) -> dict[str, Any]:
    """What a bare call on this machine would use (env files, daemon env, zero-config)."""
    machine_env = {k: env[k] for k in _MACHINE_ENV if env.get(k)}
    try:
        resolved = backends.resolve(p.Selection(), machine_env, cwd, write=False)
    except CoordError as exc:
        return {"kind": None, "location": None, "source": None, "env_file": None,
                "error": exc.message}
    env_file = resolved.source[len("env file "):] if resolved.source.startswith("env file ") else None
    return {"kind": resolved.kind, "location": resolved.location, "source": resolved.source,
            "env_file": env_file, "credentials": bool(resolved.token)}


def env_files(env: Mapping[str, str], cwd: str = "") -> list[dict[str, Any]]:
    out = []
    for path in envfiles.candidates(env):
        loaded = envfiles.load(path, cwd)
        if loaded is None:
            out.append({"path": path, "status": "absent"})
            continue
        if loaded.error is not None:
            out.append({"path": path, "status": "error", "error": loaded.error})
            continue
        selects = next((kind for name, kind in (("AGENT_COORD_API_URL", "http"),
                                                ("AGENT_COORD_ETCD_ENDPOINTS", "etcd"),
                                                ("AGENT_COORD_STATE_ROOT", "local"))
                        if loaded.get(name)), None)
        out.append({"path": path, "status": "ok", "selects": selects,
                    "machine_id": loaded.get("AGENT_COORD_MACHINE_ID")})
    return out
