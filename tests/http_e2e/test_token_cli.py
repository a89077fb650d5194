"""`agentcoordctl token provision|revoke`, client-side (no daemon): against the
local D1 of a running Worker, and (`--etcd`) against a real etcd with auth on."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from worker_fixture import WORKER_DIR, WRANGLER, worker_toolchain  # noqa: F401 - fixture

PYTHON = sys.executable


def ctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/tmp"),
            "AGENT_COORD_NO_AUTOSTART": "1", "AGENT_COORD_SOCKET": "/nonexistent/agentcoordd.sock",
            **(env or {})}
    return subprocess.run([PYTHON, "-m", "agentcoordctl.cli", *args], env=full, capture_output=True,
                          timeout=timeout)


def whoami(worker: Any, token: str) -> httpx.Response:
    return httpx.get(f"{worker.url}/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def machine_row(worker: Any, machine: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(WRANGLER), "d1", "execute", "agent-coord", "--local", "--persist-to", str(worker.persist_to),
         "--json", "--command", f"SELECT * FROM machines WHERE machine = '{machine}'"],
        cwd=WORKER_DIR, capture_output=True, text=True, timeout=120, check=True)
    (row,) = json.loads(done.stdout)[0]["results"]
    return row


# ---- refusals: no wrangler needed -----------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (("laptop-a",), "give at least one --read-prefix or --write-prefix, or --all-state"),
    (("laptop-a", "--all-state", "--read-prefix", "claims"), "--all-state cannot be combined"),
    (("laptop-a", "--all-state", "--write-prefix", "claims"), "--all-state cannot be combined"),
    (("laptop/a", "--all-state"), "invalid machine name"),
    (("laptop a", "--all-state"), "invalid machine name"),
    (("", "--all-state"), "invalid machine name"),
    (("laptop-a", "--all-state", "--database", "agent coord"), "invalid database name"),
    (("laptop-a", "--all-state", "--database", "db:1"), "invalid database name"),
    (("laptop-a", "--all-state", "--local", "--database", "x"), "choose one of --local or --database"),
    (("laptop-a", "--all-state", "--persist-to", "/tmp/x"), "--persist-to only applies with --local"),
    (("laptop-a", "--read-prefix", "claims/../etc"), "invalid scope prefix"),
    (("laptop-a", "--read-prefix", ""), "invalid scope prefix"),
    (("laptop-a", "--write-prefix", "secrets/x"), "invalid scope prefix"),
    (("laptop-a", "--all-state", "--etcd-endpoints", "http://127.0.0.1:2379"), "only apply with --etcd"),
    (("laptop-a", "--etcd", "--all-state", "--local"), "cannot be combined with --etcd"),
])
def test_provision_refuses_bad_invocations_with_exit_1(args: tuple[str, ...], message: str) -> None:
    result = ctl("token", "provision", *args)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr.decode()
    assert result.stdout == b""


def test_token_command_never_needs_or_starts_a_daemon() -> None:
    result = ctl("token", "revoke", "bad/name")
    assert result.returncode == 1 and "invalid machine name" in result.stderr.decode()
    assert "agentcoordd" not in result.stderr.decode()


def test_token_command_stays_light() -> None:
    probe = ("import json, sys\nfrom agentcoordctl import cli\ncode = cli.main(sys.argv[1:])\n"
             "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] in "
             "('anyio', 'httpx', 'structlog', 'pydantic', 'rich') or m.startswith(('agentcoordd.store', "
             "'agentcoordd.daemon', 'agentcoordd.coord')))]), file=sys.stderr)")
    result = subprocess.run([PYTHON, "-c", probe, "token", "provision", "m1", "--read-prefix", "nope"],
                            capture_output=True, timeout=60)
    code, loaded = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert (code, loaded) == (1, [])


# ---- against the Worker's local D1 ----------------------------------------------------------

def test_provision_prints_the_token_once_and_d1_keeps_only_its_hash(e2e_worker: Any) -> None:
    machine = f"tok-{uuid.uuid4().hex[:8]}"
    result = ctl("token", "provision", machine, "--local", "--persist-to", str(e2e_worker.persist_to),
                 "--read-prefix", "claims/acme/widgets", "--read-prefix", "heartbeats",
                 "--write-prefix", "claims/acme/widgets")
    assert result.returncode == 0, result.stderr
    token = result.stdout.decode().strip()
    assert result.stdout.decode() == token + "\n" and token not in result.stderr.decode()
    assert "shown once" in result.stderr.decode()
    me = whoami(e2e_worker, token).json()
    assert me == {"machine": machine, "read_prefixes": ["claims/acme/widgets", "heartbeats"],
                  "write_prefixes": ["claims/acme/widgets"]}
    row = machine_row(e2e_worker, machine)
    assert row["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in json.dumps(row)

    again = ctl("token", "provision", machine, "--local", "--persist-to", str(e2e_worker.persist_to),
                "--all-state")
    assert again.returncode == 1 and "--rotate" in again.stderr.decode()
    assert whoami(e2e_worker, token).status_code == 200  # untouched

    rotated = ctl("token", "provision", machine, "--rotate", "--local", "--persist-to",
                  str(e2e_worker.persist_to), "--all-state")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.decode().strip()
    assert new != token
    assert whoami(e2e_worker, token).status_code == 401
    assert whoami(e2e_worker, new).json()["read_prefixes"] == [""]

    revoked = ctl("token", "revoke", machine, "--local", "--persist-to", str(e2e_worker.persist_to))
    assert revoked.returncode == 0, revoked.stderr
    assert whoami(e2e_worker, new).status_code == 401


def test_wrangler_failure_is_exit_2_with_wranglers_output(worker_toolchain: None, tmp_path: Path) -> None:
    # a persistence dir without the migrated schema: wrangler's own error comes through
    result = ctl("token", "provision", "x1", "--all-state", "--local", "--persist-to", str(tmp_path))
    assert result.returncode == 2
    assert "wrangler d1 execute failed" in result.stderr.decode()
    assert "machines" in result.stderr.decode()


def test_relative_persist_to_is_the_callers_path_not_one_inside_the_worker(worker_toolchain: None,
                                                                           tmp_path: Path) -> None:
    # docs/multi-machine.md "Local rehearsal": migrate worker/.wrangler/state, then provision
    # from the repo root with the same directory spelled relative to it
    state = tmp_path / "worker" / ".wrangler" / "state"
    subprocess.run([str(WRANGLER), "d1", "migrations", "apply", "agent-coord", "--local",
                    "--persist-to", str(state)], cwd=WORKER_DIR, capture_output=True, timeout=120, check=True)
    full = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/tmp"),
            "AGENT_COORD_NO_AUTOSTART": "1", "AGENT_COORD_WORKER_DIR": str(WORKER_DIR),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run([PYTHON, "-m", "agentcoordctl.cli", "token", "provision", "dev", "--all-state",
                             "--local", "--persist-to", "worker/.wrangler/state"],
                            cwd=tmp_path, env=full, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not (WORKER_DIR / "worker").exists()
    done = subprocess.run([str(WRANGLER), "d1", "execute", "agent-coord", "--local", "--persist-to", str(state),
                           "--json", "--command", "SELECT machine FROM machines"],
                          cwd=WORKER_DIR, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout)[0]["results"] == [{"machine": "dev"}]


# ---- etcd -----------------------------------------------------------------------------------

ROOT_PASSWORD = "root-Pw-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def etcd_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from store.etcd_cluster import require_etcd, running_cluster

    from agentcoordd.store.etcd_admin import EtcdAdmin

    require_etcd()
    with running_cluster(tmp_path_factory.mktemp("etcd-token")) as cluster:
        async def enable() -> None:
            async with EtcdAdmin(cluster.endpoints) as admin:
                await admin.enable_auth(ROOT_PASSWORD)
        anyio.run(enable)
        yield cluster


def root_env(cluster: Any, **extra: str) -> dict[str, str]:
    return {"AGENT_COORD_ETCD_ENDPOINTS": ",".join(cluster.endpoints),
            "AGENT_COORD_ETCD_USER": "root", "AGENT_COORD_ETCD_PASSWORD": ROOT_PASSWORD, **extra}


async def _try(cluster: Any, user: str, password: str, op: str, path: str) -> str:
    from agentcoordd.store.base import StoreError
    from agentcoordd.store.etcd import EtcdStore

    store = EtcdStore(cluster.endpoints, user=user, password=password, timeout=5.0)
    try:
        if op == "write":
            await store.create(path, {"n": 1})
        else:
            await store.get(path)
        return "ok"
    except StoreError as exc:
        return type(exc).__name__ + ": " + exc.message
    finally:
        await store.aclose()


def test_etcd_provision_grants_the_scopes_and_the_archive_mirror(etcd_auth: Any) -> None:
    machine = f"e-{uuid.uuid4().hex[:8]}"
    # The read scope in docs/etcd.md's notation, a directory with its trailing slash.
    result = ctl("token", "provision", "--etcd", machine, "--read-prefix", "claims/acme/",
                 "--write-prefix", "claims/acme/widgets", "--write-prefix", f"heartbeats/{machine}.json",
                 env=root_env(etcd_auth))
    assert result.returncode == 0, result.stderr
    assert "read claims/acme," in result.stderr.decode()
    password = result.stdout.decode().strip()
    assert password and password not in result.stderr.decode()
    assert "archive/claims/acme/widgets" in result.stderr.decode()
    t = uuid.uuid4().hex[:8]

    def attempt(op: str, path: str) -> str:
        return anyio.run(_try, etcd_auth, machine, password, op, path)

    assert attempt("write", f"claims/acme/widgets/{t}.json") == "ok"
    assert attempt("write", f"archive/claims/acme/widgets/{t}.json") == "ok"  # gc can archive
    assert attempt("write", f"heartbeats/{machine}.json") == "ok"
    assert attempt("read", f"claims/acme/gadgets/{t}.json") == "ok"  # read scope
    denied = attempt("write", f"claims/acme/gadgets/{t}.json")
    assert denied.startswith("Forbidden") and f"claims/acme/gadgets/{t}.json" in denied
    assert attempt("read", "batches/b1.json").startswith("Forbidden")


def test_etcd_provision_refuses_an_existing_user_without_rotate_and_rotates_with_it(
        etcd_auth: Any, tmp_path: Path) -> None:
    machine = f"e-{uuid.uuid4().hex[:8]}"
    first = ctl("token", "provision", "--etcd", machine, "--all-state", env=root_env(etcd_auth))
    assert first.returncode == 0, first.stderr
    old = first.stdout.decode().strip()
    again = ctl("token", "provision", "--etcd", machine, "--all-state", env=root_env(etcd_auth))
    assert again.returncode == 1 and "--rotate" in again.stderr.decode()
    # root's password from a file instead of the environment
    pw_file = tmp_path / "root.pw"
    pw_file.write_text(ROOT_PASSWORD + "\n")
    env = root_env(etcd_auth)
    del env["AGENT_COORD_ETCD_PASSWORD"]
    rotated = ctl("token", "provision", "--etcd", machine, "--all-state", "--rotate",
                  "--password-file", str(pw_file), env=env)
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.decode().strip()
    assert new != old
    path = f"claims/o/r/{uuid.uuid4().hex[:8]}.json"
    assert anyio.run(_try, etcd_auth, machine, new, "write", path) == "ok"
    assert anyio.run(_try, etcd_auth, machine, old, "read", path) != "ok"

    revoked = ctl("token", "revoke", "--etcd", machine, env=root_env(etcd_auth))
    assert revoked.returncode == 0, revoked.stderr
    assert anyio.run(_try, etcd_auth, machine, new, "read", path) != "ok"


def test_etcd_provision_with_a_wrong_root_password_is_exit_2(etcd_auth: Any) -> None:
    result = ctl("token", "provision", "--etcd", "e-x", "--all-state",
                 env=root_env(etcd_auth, AGENT_COORD_ETCD_PASSWORD="wrong"))
    assert result.returncode == 2, result.stderr
    assert "authentication failed for user 'root'" in result.stderr.decode()
    assert result.stdout == b""


def test_etcd_provision_needs_endpoints_and_a_root_password() -> None:
    no_endpoints = ctl("token", "provision", "--etcd", "e-x", "--all-state")
    assert no_endpoints.returncode == 1 and "--etcd-endpoints" in no_endpoints.stderr.decode()
    no_password = ctl("token", "provision", "--etcd", "e-x", "--all-state",
                      "--etcd-endpoints", "http://127.0.0.1:9")
    assert no_password.returncode == 1 and "AGENT_COORD_ETCD_PASSWORD" in no_password.stderr.decode()
