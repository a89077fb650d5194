"""Taking over an existing agent-coord D1 database in place
(worker/bin/upgrade-from-agent-coord, docs/worker-upgrade.md).

The database is built exactly as an agent-coord deployment has it: the
existing Worker's own migrations (tests/fixtures/agent-coord-worker-schema),
records written the way its Worker writes them (versions counted up, the
writer in updated_by, NULL for rows older than its migration 0002) and machine
tokens inserted as its worker/bin/provision-token does (SHA-256 hex of a
random hex token in token_hash; one row older than the scope columns, so it has
their '[""]' default). Our Worker runs on it before and after the upgrade.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentcoordd import tokens
from agentcoordd.store.base import Conflict, Forbidden, Unavailable
from agentcoordd.store.http import HttpStore, TokenRejected
from worker_fixture import REPO, WORKER_DIR, WRANGLER, WorkerServer, _stop, require_toolchain, start_worker

REFERENCE_SCHEMA = REPO / "tests" / "fixtures" / "agent-coord-worker-schema"
UPGRADE = WORKER_DIR / "bin" / "upgrade-from-agent-coord"
DB = tokens.DEFAULT_DATABASE

CLAIM = "claims/acme/widgets/17.json"
HEARTBEAT = "heartbeats/ruby-codex.json"  # written before agent-coord's 0002: updated_by NULL
BATCH = "batches/b-legacy.json"
EVENT = "events/b-legacy/20260610T000000.000000Z-0a1b2c3d.json"
EVENT_DATA = {"schema_version": 1, "event_id": "20260610T000000.000000Z-0a1b2c3d", "batch_id": "b-legacy",
              "type": "claimed", "at": "2026-06-10T00:00:00Z"}
CLAIM_DATA = {"schema_version": 1, "repo": "acme/widgets", "target": "17", "agent_id": "ruby-codex",
              "status": "active", "note": "ünïcode ✓"}


def _wrangler(*args: str, cwd: Path = WORKER_DIR, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(WRANGLER), *args], cwd=cwd, capture_output=True, text=True, timeout=180)
    if check and done.returncode != 0:
        raise AssertionError(f"wrangler {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def _upgrade(persist_to: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(UPGRADE), "--local", "--persist-to", str(persist_to)],
                          capture_output=True, text=True, timeout=300)


def _sql(persist_to: Path, sql: str) -> list[list[dict[str, Any]]]:
    """The rows of each statement of `sql`."""
    done = _wrangler("d1", "execute", DB, "--local", "--persist-to", str(persist_to), "--json",
                     "--command", sql)
    return [answer["results"] for answer in json.loads(done.stdout)]


def _provision_like_agent_coord(machine: str, reads: list[str] | None, writes: list[str] | None) -> tuple[str, str]:
    """(token, SQL) as worker/bin/provision-token makes them (None: a pre-scopes row)."""
    token = secrets.token_hex(24)
    digest = hashlib.sha256(token.encode()).hexdigest()
    if reads is None:
        sql = ("INSERT INTO machines (machine, token_hash, created_at) VALUES "
               f"('{machine}', '{digest}', '2026-05-01T00:00:00Z');")
    else:
        sql = ("INSERT INTO machines (machine, token_hash, read_prefixes, write_prefixes, created_at) VALUES "
               f"('{machine}', '{digest}', '{json.dumps(reads)}', '{json.dumps(writes)}', "
               "'2026-06-01T00:00:00Z');")
    return token, sql


def _legacy_database(base: Path) -> tuple[Path, dict[str, str]]:
    """A local D1 in agent-coord's schema, seeded; its machine tokens."""
    project = base / "agent-coord-worker"
    shutil.copytree(REFERENCE_SCHEMA, project / "migrations", ignore=shutil.ignore_patterns("*.md"))
    (project / "wrangler.toml").write_text(
        'name = "agent-coord-api"\ncompatibility_date = "2026-06-01"\n\n[[d1_databases]]\n'
        f'binding = "DB"\ndatabase_name = "{DB}"\n'
        'database_id = "00000000-0000-0000-0000-000000000000"\nmigrations_dir = "migrations"\n')
    persist_to = base / "state"
    _wrangler("d1", "migrations", "apply", DB, "--local", "--persist-to", str(persist_to), cwd=project)
    issued, statements = {}, []
    for machine, reads, writes in [
        ("ruby-all", [""], [""]),
        ("ruby-old", None, None),  # provisioned before scopes existed: '[""]' by default
        ("ruby-widgets", ["claims"], ["claims/acme/widgets"]),
        ("ruby-revoked", [""], [""]),
    ]:
        issued[machine], sql = _provision_like_agent_coord(machine, reads, writes)
        statements.append(sql)
    statements.append("UPDATE machines SET revoked_at = '2026-06-02T00:00:00Z' WHERE machine = 'ruby-revoked';")
    claim = json.dumps(CLAIM_DATA, ensure_ascii=False, separators=(",", ":"))
    statements.append(
        "INSERT INTO state (path, data, version, updated_at, updated_by) VALUES "
        f"('{CLAIM}', '{claim}', 7, '2026-06-10T00:00:00.000Z', 'ruby-all'), "
        f"('{HEARTBEAT}', '{{\"agent_id\":\"ruby-codex\",\"status\":\"working\"}}', 3, '2026-05-02T00:00:00.000Z', NULL), "
        f"('{BATCH}', '{{\"batch_id\":\"b-legacy\"}}', 1, '2026-06-10T00:00:00.000Z', 'ruby-widgets'), "
        f"('{EVENT}', '{json.dumps(EVENT_DATA, separators=(',', ':'))}', 2, '2026-06-10T00:00:00.000Z', 'ruby-all');")
    tokens.execute(" ".join(statements), local=True, persist_to=persist_to)
    return persist_to, issued


@dataclass
class Upgraded:
    server: WorkerServer
    before: httpx.Response  # our Worker on the database before the conversion
    client_said: str  # what HttpStore reported then
    refused_migration: subprocess.CompletedProcess[str]
    first: subprocess.CompletedProcess[str]
    again: subprocess.CompletedProcess[str]

    def store(self, machine: str) -> HttpStore:
        return HttpStore(self.server.url, self.server.tokens[machine], timeout=15)


async def _client_error(url: str, token: str) -> str:
    async with HttpStore(url, token, timeout=15) as store:
        try:
            await store.get(CLAIM)
        except Unavailable as exc:
            return exc.message
    return "no error"


@pytest.fixture(scope="module")
def upgraded() -> Iterator[Upgraded]:
    require_toolchain()
    base = Path(tempfile.mkdtemp(prefix="acupgrade."))
    persist_to, issued = _legacy_database(base)
    # 1. our migrations alone refuse to run on it (instead of "No migrations to apply!")
    refused = _wrangler("d1", "migrations", "apply", DB, "--local", "--persist-to", str(persist_to),
                        check=False)
    # 2. our Worker, deployed first, answers a clear 500 until the conversion
    proc, url = start_worker(persist_to, base / "wrangler.log")
    try:
        before = httpx.get(f"{url}/v1/whoami", timeout=15,
                           headers={"Authorization": f"Bearer {issued['ruby-all']}"})
        client_said = anyio.run(_client_error, url, issued["ruby-all"])
        # 3. the conversion, while that Worker keeps running; then once more (a no-op)
        first = _upgrade(persist_to)
        again = _upgrade(persist_to)
        yield Upgraded(WorkerServer(url, persist_to, issued, proc, base / "wrangler.log"),
                       before, client_said, refused, first, again)
    finally:
        _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def test_before_the_upgrade_our_migrations_and_worker_say_what_is_wrong(upgraded: Upgraded) -> None:
    assert upgraded.refused_migration.returncode != 0
    shown = upgraded.refused_migration.stdout + upgraded.refused_migration.stderr
    assert "no such column: token_sha256" in shown
    assert "upgrade-from-agent-coord" in shown  # the guard migration's name says what to run
    assert (upgraded.before.status_code, upgraded.before.json()) == (500, {"error": "schema_not_migrated"})
    assert "schema_not_migrated" in upgraded.client_said
    assert "worker/bin/upgrade-from-agent-coord" in upgraded.client_said


def test_the_upgrade_converts_once_then_is_a_no_op(upgraded: Upgraded) -> None:
    assert upgraded.first.returncode == 0, upgraded.first.stdout + upgraded.first.stderr
    assert "in agent-coord's schema: converting it" in upgraded.first.stdout
    assert upgraded.again.returncode == 0, upgraded.again.stderr
    assert "already in agentcoord's schema: nothing to convert" in upgraded.again.stdout
    assert "No migrations to apply" in upgraded.again.stdout


async def test_records_keep_their_data_versions_and_writers(upgraded: Upgraded) -> None:
    async with upgraded.store("ruby-old") as store:
        claim = await store.get(CLAIM)
        assert (claim.data, claim.version) == (CLAIM_DATA, "7")
        assert (await store.get(HEARTBEAT)).version == "3"
        listed = await store.list("batches")
        assert [(e.path, e.version) for e in listed.entries] == [(BATCH, "1")]
    raw = httpx.get(f"{upgraded.server.url}/v1/state/heartbeats%2Fruby-codex.json", timeout=10,
                    headers={"Authorization": f"Bearer {upgraded.server.tokens['ruby-all']}"}).json()
    assert "updated_by" not in raw  # NULL before agent-coord's 0002: still left out
    raw = httpx.get(f"{upgraded.server.url}/v1/state/claims%2Facme%2Fwidgets%2F17.json", timeout=10,
                    headers={"Authorization": f"Bearer {upgraded.server.tokens['ruby-all']}"}).json()
    assert raw["updated_by"] == "ruby-all"


async def test_writes_continue_above_the_old_versions_and_deletes_never_reuse_them(upgraded: Upgraded) -> None:
    async with upgraded.store("ruby-all") as store:
        assert await store.replace(CLAIM, {**CLAIM_DATA, "status": "renewed"}, "7") == "8"
        with pytest.raises(Conflict):
            await store.replace(CLAIM, CLAIM_DATA, "7")
        await store.delete(BATCH, "1")
        assert await store.create(BATCH, {"batch_id": "b-legacy", "again": True}) == "2"  # tombstones work
        with pytest.raises(Conflict):
            await store.replace(BATCH, {"stale": True}, "1")


def test_existing_event_records_are_in_the_event_feed(upgraded: Upgraded) -> None:
    """Migration 0003 ran on the converted database: its events table is backfilled and kept."""
    headers = {"Authorization": f"Bearer {upgraded.server.tokens['ruby-all']}"}
    feed = httpx.get(f"{upgraded.server.url}/v1/events", params={"batch_id": "b-legacy"}, headers=headers,
                     timeout=15).json()
    assert feed["events"] == [{"path": EVENT, "data": EVENT_DATA, "version": 2, "updated_by": "ruby-all",
                               "at": "2026-06-10T00:00:00Z"}]
    changes = httpx.get(f"{upgraded.server.url}/v1/events", params={"batch_id": "b-legacy", "since": 0},
                        headers=headers, timeout=15).json()
    assert [(c["path"], c["seq"]) for c in changes["changes"]] == [(EVENT, 1)]
    later = "events/b-legacy/20260611T000000.000000Z-0a1b2c3e.json"
    resp = httpx.put(f"{upgraded.server.url}/v1/state/{later.replace('/', '%2F')}", json={"data": {"at": "x"}},
                     headers={**headers, "If-None-Match": "*"}, timeout=15)
    assert resp.status_code == 201
    changes = httpx.get(f"{upgraded.server.url}/v1/events", params={"batch_id": "b-legacy", "since": 1},
                        headers=headers, timeout=15).json()
    assert [(c["path"], c["seq"]) for c in changes["changes"]] == [(later, 2)]


async def test_existing_tokens_keep_their_machines_and_scopes(upgraded: Upgraded) -> None:
    expected = {"ruby-all": ([""], [""]), "ruby-old": ([""], [""]),
                "ruby-widgets": (["claims"], ["claims/acme/widgets"])}
    for machine, (reads, writes) in expected.items():
        async with upgraded.store(machine) as store:
            me = await store.whoami()
        assert (me.machine, me.read_prefixes, me.write_prefixes) == (machine, reads, writes)
    async with upgraded.store("ruby-widgets") as scoped:
        assert await scoped.create("claims/acme/widgets/new.json", {"n": 1}) == "1"
        with pytest.raises(Forbidden):
            await scoped.create("claims/acme/gadgets/new.json", {"n": 1})
        with pytest.raises(Forbidden):
            await scoped.get(HEARTBEAT)
    async with upgraded.store("ruby-revoked") as revoked:
        with pytest.raises(TokenRejected):
            await revoked.whoami()


async def test_new_tokens_are_provisioned_with_our_tooling(upgraded: Upgraded) -> None:
    grant = tokens.build_provision("after-upgrade", read_prefixes=["heartbeats"], write_prefixes=[])
    tokens.execute(grant.sql, local=True, persist_to=upgraded.server.persist_to)
    rotated = tokens.build_provision("ruby-old", all_state=True, rotate=True)
    tokens.execute(rotated.sql, local=True, persist_to=upgraded.server.persist_to)
    async with HttpStore(upgraded.server.url, grant.token, timeout=15) as store:
        assert (await store.whoami()).read_prefixes == ["heartbeats"]
        assert (await store.get(HEARTBEAT)).version == "3"
    async with HttpStore(upgraded.server.url, rotated.token, timeout=15) as store:
        assert (await store.whoami()).machine == "ruby-old"


def test_the_schema_is_the_one_a_new_database_gets(upgraded: Upgraded, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    _wrangler("d1", "migrations", "apply", DB, "--local", "--persist-to", str(fresh))
    schema = (
        "SELECT m.name AS tbl, p.name, p.type, p.\"notnull\", p.dflt_value, p.pk "
        "FROM sqlite_master m, pragma_table_info(m.name) p "
        "WHERE m.type = 'table' AND m.name IN ('machines', 'state_tombstones') ORDER BY m.name, p.cid; "
        "SELECT name FROM pragma_table_info('state') ORDER BY name; "
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' "
        "ORDER BY name; "
        "SELECT type, name, tbl_name FROM sqlite_master WHERE type IN ('index', 'trigger') "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY type, name; "
        "SELECT m.name AS tbl, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
        "WHERE m.type = 'table' AND m.name IN ('events', 'meta') ORDER BY m.name, p.cid;"
    )
    upgraded_schema, fresh_schema = _sql(upgraded.server.persist_to, schema), _sql(fresh, schema)
    assert len(upgraded_schema) == 5 and upgraded_schema[0] and upgraded_schema[3] and upgraded_schema[4]
    assert upgraded_schema == fresh_schema
