"""`agentcoordd`: the per-machine coordination daemon.

    agentcoordd [--socket PATH] [--state-dir DIR] [--foreground] [--log-level LEVEL]
                [--config PATH]
                [--max-connections N] [--max-hello-bytes N] [--hello-timeout SECONDS]
                [--max-buffered-bytes N] [--metrics-port PORT] [--metrics-open]
                [--no-metrics]

Without --foreground the daemon detaches (new session, stdio to /dev/null,
log appended to STATE_DIR/agentcoordd.log) once its socket is listening.
systemd and launchd run it with --foreground; systemd socket activation
(LISTEN_FDS) and Type=notify (NOTIFY_SOCKET) are honoured.

--metrics-port (or AGENT_COORD_METRICS_PORT in the daemon's environment or the
machine's env file) serves the loopback dashboard server, and with it /metrics,
on 127.0.0.1:PORT from the start, for the daemon's user only (its token);
--metrics-open (AGENT_COORD_METRICS_OPEN=1) makes that port serve /metrics
alone, to any local user; --no-metrics (AGENT_COORD_METRICS=0) records none
(docs/metrics.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from agentcoordd import protocol as p

LOG_NAME = "agentcoordd.log"
METRICS_PORT_VAR = "AGENT_COORD_METRICS_PORT"
METRICS_VAR = "AGENT_COORD_METRICS"
METRICS_OPEN_VAR = "AGENT_COORD_METRICS_OPEN"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentcoordd", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=None,
                        help="socket path (default: $AGENT_COORD_SOCKET, "
                        "$XDG_RUNTIME_DIR/agentcoord/agentcoordd.sock, or "
                        "$XDG_STATE_HOME/agentcoord/run/agentcoordd.sock)")
    parser.add_argument("--state-dir", default=None,
                        help="daemon state and log directory (default: $XDG_STATE_HOME/agentcoord)")
    parser.add_argument("--foreground", action="store_true",
                        help="stay attached; log to stderr (systemd, launchd, tests)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    parser.add_argument("--config", default=None, metavar="PATH",
                        help="the daemon's config file (default: $AGENT_COORD_DAEMON_CONFIG, "
                        "$XDG_CONFIG_HOME/agentcoord/agentcoordd.toml; agentcoordctl docs notifications)")
    limits = parser.add_argument_group("limits (agentcoordctl docs reliability)")
    limits.add_argument("--max-connections", type=_positive(int), default=None, metavar="N",
                        help="concurrent client connections; more are refused (default 256)")
    limits.add_argument("--max-hello-bytes", type=_positive(int), default=None, metavar="N",
                        help="largest frame before Hello, and largest frame read outside the "
                        "buffered-bytes budget (default 65536)")
    limits.add_argument("--hello-timeout", type=_positive(float), default=None, metavar="SECONDS",
                        help="a client must send Hello within this (default 10)")
    limits.add_argument("--max-buffered-bytes", type=_positive(int), default=None, metavar="N",
                        help="bytes of larger frames read at once across connections "
                        "(default 16777216)")
    metrics = parser.add_argument_group("metrics (agentcoordctl docs metrics)")
    metrics.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                         help="serve /metrics (and the dashboard) on 127.0.0.1:PORT from the start "
                         f"(default: {METRICS_PORT_VAR} from the environment or the env file, else "
                         "only once `agentcoordctl dashboard` starts the server)")
    metrics.add_argument("--metrics-open", action="store_true",
                         help="make --metrics-port a listener of its own that serves /metrics "
                         "only, to any local user, without the dashboard token (also "
                         f"${METRICS_OPEN_VAR}=1); the dashboard then gets its own port")
    metrics.add_argument("--no-metrics", action="store_true",
                         help=f"record no metrics (also ${METRICS_VAR}=0); /metrics answers 404")
    parser.add_argument("--version", action="version", version=f"agentcoordd {p.DAEMON_VERSION}")
    return parser.parse_args(argv)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (0 < value < 2**53):  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be positive and finite: {text!r}")
        return value
    return parse


def _port(text: str) -> int:
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port (1-65535): {text!r}")
    return int(text)


def _metrics_settings(args: argparse.Namespace, env: Any) -> tuple[bool, int | None, bool]:
    """(record metrics?, port to serve from the start, open to any local user?). Flags win; then the daemon's
    environment; then the machine's consumer env file (~/.config/agent-coord/env), so
    one line there reaches a service and an autostarted daemon alike."""
    from agentcoordd.daemon import envfiles

    sources = [("environment", env)] + [(f"env file {f.path}", f.values)
                                        for f in envfiles.existing(env) if f.error is None]

    def setting(name: str) -> tuple[str, str] | None:
        return next(((where, values[name].strip()) for where, values in sources
                     if values.get(name, "").strip()), None)

    def on(name: str, default: bool) -> bool:
        found = setting(name)
        return default if found is None else found[1].lower() not in ("0", "false", "no", "off")

    enabled = not args.no_metrics and on(METRICS_VAR, True)
    open_ = args.metrics_open or on(METRICS_OPEN_VAR, False)
    port = args.metrics_port
    found = setting(METRICS_PORT_VAR) if port is None else None
    if found is not None:
        try:
            port = _port(found[1])
        except argparse.ArgumentTypeError as exc:
            raise SystemExit(f"agentcoordd: {METRICS_PORT_VAR} ({found[0]}): {exc}") from None
    return enabled, port, open_


def _limits(args: argparse.Namespace) -> Any:
    from agentcoordd.daemon.server import Limits

    given = {"max_connections": args.max_connections, "hello_frame": args.max_hello_bytes,
             "hello_deadline": args.hello_timeout, "buffered_bytes": args.max_buffered_bytes}
    return Limits(**{k: v for k, v in given.items() if v is not None})


def _raise_fd_limit(wanted: int) -> None:
    """Each connection is a file descriptor: lift the soft limit toward the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


def _inherited_socket() -> socket.socket | None:
    """systemd socket activation: the first fd systemd passed when LISTEN_PID is us."""
    from agentcoordd.daemon.sdnotify import listen_fds

    fds = listen_fds()
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if not fds:
        return None
    for extra in fds[1:]:  # we listen on one socket only
        try:
            os.close(extra)
        except OSError:
            pass
    sock = socket.socket(fileno=fds[0])
    os.set_inheritable(sock.fileno(), False)
    return sock


def _sd_notify(message: str) -> None:
    from agentcoordd.daemon.sdnotify import notify

    notify(message)


def _detach(log_path: str) -> int | None:
    """Fork; the parent waits for the child's readiness byte and returns its exit code."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            ok = pipe.read(1)
        return 0 if ok == b"1" else 1
    os.close(read_fd)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(log_fd, 2)
    os.close(devnull)
    os.close(log_fd)
    os.environ["_AGENTCOORDD_READY_FD"] = str(write_fd)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ
    metrics, metrics_port, metrics_open = _metrics_settings(args, env)
    socket_path = os.path.abspath(args.socket or p.default_socket_path(env))
    state_dir = os.path.abspath(args.state_dir or p.default_state_dir(env))
    os.makedirs(state_dir, mode=0o700, exist_ok=True)

    if not args.foreground:
        code = _detach(os.path.join(state_dir, LOG_NAME))
        if code is not None:
            return code

    # Heavy imports only once we know we run.
    import anyio

    from agentcoordd.daemon import logging as daemon_logging
    from agentcoordd.daemon.server import AlreadyRunning, Daemon, StartupError

    daemon_logging.configure(args.log_level)
    log = daemon_logging.get_logger()
    limits = _limits(args)
    from agentcoordd.daemon.dashboard_slots import MAX_CONNECTIONS as HTTP_CONNECTIONS
    from agentcoordd.store.commit import FDS_HELD

    # + stores, log, lock files, threads; the temp and lock files held by a write
    # round and a renewal batch at once (store/commit.py); the loopback HTTP server.
    _raise_fd_limit(limits.max_connections + 256 + 2 * FDS_HELD + 2 * HTTP_CONNECTIONS)
    daemon = Daemon(socket_path, state_dir, log=log, limits=limits, metrics=metrics,
                    http_port=metrics_port, config=args.config, metrics_open=metrics_open)
    ready_fd = os.environ.pop("_AGENTCOORDD_READY_FD", None)

    def ready() -> None:
        _sd_notify(f"READY=1\nSTATUS=listening on {socket_path}\nMAINPID={os.getpid()}")
        if ready_fd is not None:
            os.write(int(ready_fd), b"1")
            os.close(int(ready_fd))

    try:
        daemon.bind(inherited=_inherited_socket())
    except AlreadyRunning as exc:  # a lost autostart race is normal: not an error line
        log.info("not started: another agentcoordd serves", reason=str(exc), socket=socket_path)
        print(f"agentcoordd: {exc}", file=sys.stderr)
        return 1
    except (StartupError, OSError) as exc:
        log.error("cannot start", error=str(exc), socket=socket_path)
        print(f"agentcoordd: {exc}", file=sys.stderr)
        return 1
    try:
        anyio.run(_serve, daemon, ready)
    except KeyboardInterrupt:  # pragma: no cover - signals are handled in serve()
        pass
    finally:
        daemon.release()
    _sd_notify("STOPPING=1")
    return 0


async def _serve(daemon: Any, ready: Any) -> None:
    await daemon.serve(ready)


if __name__ == "__main__":
    sys.exit(main())
