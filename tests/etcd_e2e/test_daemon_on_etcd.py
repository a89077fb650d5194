"""Every coordination command through agentcoordd on a real single-member etcd.

ctl subprocesses select etcd with AGENT_COORD_ETCD_ENDPOINTS (and a per-test
AGENT_COORD_ETCD_PREFIX); what landed is checked by reading etcd directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .conftest import NO_LOCAL, EtcdDaemon, new_prefix, write_secret

REPO = "acme/widgets"
CLAIM_PATH = "claims/acme/widgets/1.json"
BATCH = {"batch_id": "b1", "repo": REPO, "lanes": [
    {"name": "backend", "owner": "agent-a", "targets": ["1"]}]}


def out(result: Any) -> str:
    return result.stdout.decode()


def err(result: Any) -> str:
    return result.stderr.decode()


def claim(e: EtcdDaemon, agent: str, target: str = "1", *extra: str, **kwargs: Any) -> Any:
    return e.ctl("claim", "--agent-id", agent, "--repo", REPO, "--target", target, *extra, **kwargs)


# ---- claim / refuse / heartbeat / release / takeover ---------------------------------


def test_claim_refuse_heartbeat_release_and_reclaim(on_etcd: EtcdDaemon) -> None:
    first = claim(on_etcd, "agent-a", "1", "--branch", "feat/1")
    assert first.returncode == 0, err(first)
    assert out(first).startswith("claimed acme/widgets#1 by agent-a until ")
    assert "local mode" not in err(first)
    stored = on_etcd.read(CLAIM_PATH)
    assert stored is not None and (stored["agent_id"], stored["branch"]) == ("agent-a", "feat/1")

    beat = on_etcd.ctl("heartbeat", "--agent-id", "agent-a", "--repo", REPO, "--target", "1")
    assert beat.returncode == 0, err(beat)
    assert on_etcd.read("heartbeats/agent-a.json")["agent_id"] == "agent-a"

    refused = claim(on_etcd, "agent-b")
    assert refused.returncode == 3
    assert err(refused).startswith("CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-a")

    renewed = claim(on_etcd, "agent-a")
    assert renewed.returncode == 0, err(renewed)

    released = on_etcd.ctl("release", "--agent-id", "agent-a", "--repo", REPO, "--target", "1")
    assert (released.returncode, out(released)) == (0, "released acme/widgets#1 by agent-a\n")
    assert on_etcd.read(CLAIM_PATH)["status"] == "released"

    after = claim(on_etcd, "agent-b")
    assert after.returncode == 0, err(after)
    assert on_etcd.read(CLAIM_PATH)["agent_id"] == "agent-b"


def test_takeover_of_a_dead_holder(on_etcd: EtcdDaemon) -> None:
    assert claim(on_etcd, "agent-a").returncode == 0
    beat = on_etcd.ctl("heartbeat", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                       "--ttl", "1")
    assert beat.returncode == 0, err(beat)
    assert claim(on_etcd, "agent-b").returncode == 3  # live, then stale until 4 x ttl
    time.sleep(4.2)
    taken = claim(on_etcd, "agent-b")
    assert taken.returncode == 0, err(taken)
    assert on_etcd.read(CLAIM_PATH)["agent_id"] == "agent-b"


# ---- batches, terminal closeout, status, audit, gc ----------------------------------


def _batch_lane(e: EtcdDaemon) -> None:
    manifest = e.daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    registered = e.ctl("register-batch", "--file", str(manifest))
    assert (registered.returncode, out(registered)) == (0, "registered batch b1\n"), err(registered)
    assert claim(e, "agent-a", "1", "--batch-id", "b1").returncode == 0
    beat = e.ctl("heartbeat", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                 "--batch-id", "b1", "--status", "working")
    assert beat.returncode == 0, err(beat)


def test_terminal_release_status_and_batch_audit(on_etcd: EtcdDaemon) -> None:
    _batch_lane(on_etcd)
    pending = on_etcd.ctl("batch-audit", "--batch-id", "b1", "--json")
    assert pending.returncode == 1, err(pending)
    assert json.loads(out(pending))["verdict"] == "incomplete"

    closed = on_etcd.ctl("release", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                         "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m1"})
    assert (closed.returncode, out(closed)) == (0, "released acme/widgets#1 by agent-a\n"), err(closed)
    again = on_etcd.ctl("release", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                        "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m1"})
    assert (again.returncode, out(again)) == (0, "lane already closed for acme/widgets#1\n")
    events = on_etcd.paths("events/b1")
    assert events and all(path.startswith("events/b1/") for path in events)

    audit = on_etcd.ctl("batch-audit", "--batch-id", "b1", "--json")
    assert audit.returncode == 0, out(audit) + err(audit)
    assert json.loads(out(audit))["verdict"] == "complete"

    target = on_etcd.ctl("status", "--repo", REPO, "--target", "1", "--json")
    assert target.returncode == 0, err(target)
    assert [c["status"] for c in json.loads(out(target))["claims"]] == ["released"]
    batch = on_etcd.ctl("status", "--batch-id", "b1", "--json")
    assert batch.returncode == 0, err(batch)
    assert json.loads(out(batch))["batches"][0]["batch_id"] == "b1"
    full = on_etcd.ctl("status", "--json")
    assert full.returncode == 0, err(full)
    payload = json.loads(out(full))
    assert [c["agent_id"] for c in payload["claims"]] == ["agent-a"]
    assert len(payload["events"]) == len(events)
    text = on_etcd.ctl("status")
    assert text.returncode == 0 and out(text).startswith("claims\n- acme/widgets#1 released agent-a")


def test_gc_archives_through_the_daemon_and_is_idempotent(on_etcd: EtcdDaemon) -> None:
    assert claim(on_etcd, "agent-a").returncode == 0
    assert on_etcd.ctl("release", "--agent-id", "agent-a", "--repo", REPO,
                       "--target", "1").returncode == 0
    plan = on_etcd.ctl("gc", "--dry-run", "--hot-days", "0", "--json")
    assert plan.returncode == 0, err(plan)
    planned = json.loads(out(plan))["actions"]
    assert planned and on_etcd.read(CLAIM_PATH) is not None  # a dry run writes nothing

    done = on_etcd.ctl("gc", "--execute", "--hot-days", "0", "--json")
    assert done.returncode == 0, err(done)
    assert json.loads(out(done))["actions"] == planned
    assert on_etcd.read(CLAIM_PATH) is None
    assert on_etcd.paths("archive/claims") != []
    again = on_etcd.ctl("gc", "--execute", "--hot-days", "0", "--json")
    assert again.returncode == 0, err(again)
    assert [a for a in json.loads(out(again))["actions"] if a.get("action") != "delete"] == []


# ---- selection and configuration -------------------------------------------------------


def test_key_prefix_gives_each_team_its_own_namespace(on_etcd: EtcdDaemon) -> None:
    other = new_prefix()
    assert claim(on_etcd, "agent-a").returncode == 0
    second = claim(on_etcd, "agent-b", env={"AGENT_COORD_ETCD_PREFIX": other})
    assert second.returncode == 0, err(second)  # another team's claims/ is another keyspace
    assert on_etcd.read(CLAIM_PATH)["agent_id"] == "agent-a"
    assert on_etcd.read(CLAIM_PATH, key_prefix=other)["agent_id"] == "agent-b"
    assert on_etcd.read(CLAIM_PATH, key_prefix="") is None  # nothing outside the prefixes


def test_flag_wins_over_a_state_root_in_the_environment(on_etcd: EtcdDaemon) -> None:
    flagged = on_etcd.ctl("claim", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                          "--etcd-endpoints", ",".join(on_etcd.endpoints),
                          env={"AGENT_COORD_ETCD_ENDPOINTS": "", "AGENT_COORD_STATE_ROOT":
                               str(on_etcd.daemon.root)}, unset=())
    assert flagged.returncode == 0, err(flagged)
    assert on_etcd.read(CLAIM_PATH)["agent_id"] == "agent-a"
    assert not (on_etcd.daemon.root / "claims").exists()


def test_endpoints_and_state_root_in_the_environment_use_etcd_with_a_warning(
        on_etcd: EtcdDaemon) -> None:
    both = claim(on_etcd, "agent-a", env={"AGENT_COORD_STATE_ROOT": str(on_etcd.daemon.root)},
                 unset=())
    assert both.returncode == 0, err(both)
    assert "both AGENT_COORD_ETCD_ENDPOINTS and AGENT_COORD_STATE_ROOT are set; using etcd" in err(both)
    assert on_etcd.read(CLAIM_PATH) is not None
    assert not (on_etcd.daemon.root / "claims").exists()


def test_two_explicit_selectors_are_a_usage_error(on_etcd: EtcdDaemon) -> None:
    result = on_etcd.ctl("claim", "--agent-id", "a", "--repo", REPO, "--target", "1",
                         "--etcd-endpoints", on_etcd.endpoints[0], "--state-root",
                         str(on_etcd.daemon.root))
    assert result.returncode == 1
    assert "choose one backend: --state-root and --etcd-endpoints" in err(result)


def test_consumer_env_file_configures_etcd_for_implicit_calls(on_etcd: EtcdDaemon) -> None:
    env_file = on_etcd.daemon.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(f"AGENT_COORD_ETCD_ENDPOINTS={','.join(on_etcd.endpoints)}\n"
                        f"AGENT_COORD_ETCD_PREFIX={on_etcd.prefix}\n")
    result = on_etcd.daemon.ctl("claim", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
                                unset=NO_LOCAL)
    assert result.returncode == 0, err(result)
    assert "local mode" not in err(result)
    assert on_etcd.read(CLAIM_PATH)["agent_id"] == "agent-a"


def test_daemon_environment_configures_etcd(etcd_server: Any, daemon_factory: Any) -> None:
    prefix = new_prefix()
    d = daemon_factory("machine", AGENT_COORD_ETCD_ENDPOINTS=",".join(etcd_server.endpoints),
                       AGENT_COORD_ETCD_PREFIX=prefix)
    d.start()
    result = d.ctl("claim", "--agent-id", "agent-a", "--repo", REPO, "--target", "1", unset=NO_LOCAL)
    assert result.returncode == 0, err(result)
    assert "local mode" not in err(result)
    assert EtcdDaemon(d, etcd_server.endpoints, prefix).read(CLAIM_PATH)["agent_id"] == "agent-a"
    status = d.ctl("daemon", "status", "--json")
    (backend,) = json.loads(out(status))["backends"]
    expected = {"kind": "etcd", "location": ",".join(etcd_server.endpoints),
                "source": "daemon environment", "credentials": False, "key_prefix": prefix}
    assert expected.items() <= backend.items(), backend


def test_unreachable_endpoints_exit_2_naming_etcd(on_etcd: EtcdDaemon) -> None:
    from etcd_cluster import _free_ports

    dead = ",".join(f"http://127.0.0.1:{port}" for port in _free_ports(2))
    result = claim(on_etcd, "agent-a", env={"AGENT_COORD_ETCD_ENDPOINTS": dead})
    assert result.returncode == 2
    assert "etcd unavailable for get claims/acme/widgets/1.json" in err(result)


def test_incomplete_or_broken_etcd_configuration_exits_2_naming_the_setting(
        on_etcd: EtcdDaemon) -> None:
    base: Path = on_etcd.daemon.base
    cases = [
        ({"AGENT_COORD_ETCD_USER": "m1"}, "AGENT_COORD_ETCD_PASSWORD or AGENT_COORD_ETCD_PASSWORD_FILE"),
        ({"AGENT_COORD_ETCD_PASSWORD": "x"}, "AGENT_COORD_ETCD_USER is not set"),
        ({"AGENT_COORD_ETCD_USER": "m1", "AGENT_COORD_ETCD_PASSWORD": "x",
          "AGENT_COORD_ETCD_PASSWORD_FILE": str(base / "pw")}, "set only one"),
        ({"AGENT_COORD_ETCD_USER": "m1", "AGENT_COORD_ETCD_PASSWORD_FILE": str(base / "missing-pw")},
         f"cannot read etcd password file {base / 'missing-pw'}"),
        ({"AGENT_COORD_ETCD_CA_FILE": str(base / "missing-ca.crt")},
         f"cannot load etcd TLS files {base / 'missing-ca.crt'}"),
        ({"AGENT_COORD_ETCD_PREFIX": "/abs"}, "invalid etcd key prefix"),
    ]
    for env, expected in cases:
        result = claim(on_etcd, "agent-a", env=env)
        assert result.returncode == 2, (env, err(result))
        assert expected in err(result), (env, err(result))
    flag = on_etcd.ctl("claim", "--agent-id", "a", "--repo", REPO, "--target", "1",
                       "--etcd-endpoints", "ftp://127.0.0.1:1")
    assert flag.returncode == 1 and "http:// or https://" in err(flag)
    assert on_etcd.read(CLAIM_PATH) is None


def test_password_file_on_a_cluster_without_auth_is_accepted(on_etcd: EtcdDaemon) -> None:
    pw = write_secret(on_etcd.daemon.base / "pw", "not-needed\n")
    result = claim(on_etcd, "agent-a", env={"AGENT_COORD_ETCD_USER": "m1",
                                            "AGENT_COORD_ETCD_PASSWORD_FILE": str(pw)})
    assert result.returncode == 0, err(result)
