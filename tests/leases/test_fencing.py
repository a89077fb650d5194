"""Fencing tokens (issue 43, part 1), with real daemons on local, Worker and etcd:
monotonic across release, gc, deletion and restarts; `fence check`; `--fencing-token`
refusals; the documented pre-push hook and CI guard; a root the existing tool wrote in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from leases.support import Backend, wait_until

DOCS = Path(__file__).resolve().parents[2] / "docs" / "fencing.md"


def _token(claim: dict[str, Any]) -> int:
    token = claim["claim"]["fencing_token"]
    assert isinstance(token, int) and token > 0
    return token


def test_tokens_only_grow_across_release_gc_deletion_and_a_restart(
        backend: Backend, machines: Any, repo: str, agent: Any) -> None:
    m1 = machines("m1")
    a, b = agent("a"), agent("b")
    claim = ("claim", "--repo", repo, "--target", "1", "--agent-id")
    first = _token(m1.json(*claim, a))
    assert _token(m1.json(*claim, a)) == first  # the holder's renewal keeps it
    assert m1.ctl("release", "--agent-id", a, "--repo", repo, "--target", "1").returncode == 0
    second = _token(m1.json(*claim, b))
    assert second > first
    assert m1.ctl("release", "--agent-id", b, "--repo", repo, "--target", "1").returncode == 0
    gc = m1.ctl("gc", "--execute", "--hot-days", "0", "--prefix", "claims")
    assert gc.returncode == 0, gc.stderr
    assert backend.read(f"claims/{repo}/1.json") is None  # archived, then deleted
    m1.daemon.stop()
    m1.daemon.start()
    third = _token(m1.json(*claim, a))
    assert third > second
    backend.plant(f"claims/{repo}/1.json", {**backend.read(f"claims/{repo}/1.json"),
                                            "status": "released"})
    fourth = _token(m1.json(*claim, b))
    assert fourth > third
    machines("m2").json(*claim, b)  # another machine renews: the same token
    assert backend.read(f"claims/{repo}/1.json")["fencing_token"] == fourth


def test_fence_check_and_fenced_writes(backend: Backend, machines: Any, repo: str, agent: Any) -> None:
    m1 = machines("m1")
    a, op = agent("a"), agent("op")
    token = _token(m1.json("claim", "--agent-id", a, "--repo", repo, "--target", "2",
                           "--batch-id", "b1"))
    check = ("fence", "check", "--repo", repo, "--target", "2", "--token")
    current = m1.ctl(*check, str(token))
    assert current.returncode == 0 and current.stdout.decode().startswith(f"fencing token {token} holds ")
    assert m1.ctl("heartbeat", "--agent-id", a, "--repo", repo, "--target", "2",
                  "--fencing-token", str(token)).returncode == 0
    taken = m1.json("takeover", "--force", "--reason", "stuck", "--agent-id", op, "--repo", repo,
                    "--target", "2")
    assert _token(taken) > token
    stale = m1.ctl(*check, str(token), "--json")
    assert stale.returncode == 3, stale.stderr
    verdict = json.loads(stale.stdout)
    assert (verdict["state"], verdict["holder"], verdict["current_token"]) == (
        "superseded", op, _token(taken))
    assert f"FENCED: fencing token {token} of {repo}#2 is superseded" in stale.stderr.decode()
    beat_before = backend.read(f"heartbeats/{a}.json")
    for argv in (("heartbeat", "--agent-id", a, "--repo", repo, "--target", "2", "--phase", "late"),
                 ("release", "--agent-id", a, "--repo", repo, "--target", "2"),
                 ("record-event", "--batch-id", "b1", "--type", "note", "--agent-id", a,
                  "--repo", repo, "--target", "2", "--message", "pushed")):
        refused = m1.ctl(*argv, "--fencing-token", str(token))
        assert refused.returncode == 3 and "FENCED:" in refused.stderr.decode(), (argv, refused.stderr)
    assert backend.read(f"heartbeats/{a}.json") == beat_before  # nothing written
    assert not [e for e in backend.events("b1") if e.get("message") == "pushed"]
    assert backend.read(f"claims/{repo}/2.json")["agent_id"] == op
    missing = m1.ctl("heartbeat", "--agent-id", a, "--fencing-token", str(token))
    assert missing.returncode == 1 and "--fencing-token needs --repo and --target" in missing.stderr.decode()
    nothing = m1.ctl("fence", "check", "--repo", repo, "--target", "404", "--token", "1")
    assert nothing.returncode == 3 and "the target has no claim" in nothing.stderr.decode()


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # shell around `fence check` (above)
def test_the_documented_pre_push_hook_and_ci_guard(backend: Backend, machines: Any, repo: str,
                                                   agent: Any, tmp_path: Path) -> None:
    m1 = machines("m1")
    a, op = agent("a"), agent("op")
    hook, guard = re.findall(r"```sh\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)[-2:]
    assert hook.startswith("#!/bin/sh") and "fence check" in guard
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    git = ["git", "-c", "user.email=a@example.test", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True, capture_output=True)
    (work / ".git" / "hooks" / "pre-push").write_text(hook)
    (work / ".git" / "hooks" / "pre-push").chmod(0o755)
    argv, env = m1.argv("run", "--agent-id", a, "--repo", repo, "--target", "3", "--",
                        "sh", "-c", 'echo "$AGENT_COORD_FENCING_TOKEN $AGENT_COORD_FENCE_REPO '
                        '$AGENT_COORD_FENCE_TARGET"')
    ran = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    token_text, fence_repo, fence_target = ran.stdout.decode().split()
    assert (fence_repo, fence_target) == (repo, "3") and int(token_text) > 0
    token = _token(m1.json("claim", "--agent-id", a, "--repo", repo, "--target", "3"))
    grant = {**env, "AGENT_COORD_FENCING_TOKEN": str(token), "AGENT_COORD_FENCE_REPO": repo,
             "AGENT_COORD_FENCE_TARGET": "3", "PATH": f"{Path(os.sys.executable).parent}:{env['PATH']}"}

    def push(message: str) -> subprocess.CompletedProcess:
        (work / "f.txt").write_text(message)
        subprocess.run([*git, "-C", str(work), "add", "f.txt"], check=True)
        subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", message], check=True)
        return subprocess.run(["git", "-C", str(work), "push", "-q", "origin", "HEAD:main"],
                              env=grant, capture_output=True, timeout=60)

    assert push("while holding").returncode == 0
    m1.json("takeover", "--force", "--reason", "reassigned", "--agent-id", op, "--repo", repo,
            "--target", "3")
    refused = push("after the takeover")
    assert refused.returncode != 0 and b"FENCED: fencing token" in refused.stderr
    pushed = subprocess.run(["git", "--git-dir", str(remote), "log", "--format=%s", "main"],
                            capture_output=True, check=True).stdout.decode().split("\n")
    assert pushed[0] == "while holding"
    guarded = subprocess.run(["sh", "-c", guard], capture_output=True, timeout=60, env={
        **grant, "REPO": repo, "TARGET": "3", "FENCING_TOKEN": str(token)})
    assert guarded.returncode == 1 and b"moved on; not deploying" in guarded.stderr


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # the recording is of a local root
def test_a_root_the_existing_tool_renewed_or_took_over(backend: Backend, machines: Any,
                                                       agent: Any, fixtures_dir: Path) -> None:
    """tests/fixtures/peer-mixed: agent-coord renews a claim with a token (dropping the
    field) and takes one over. Our keep-alive lane survives the renewal (the same grant),
    fence checks answer UNKNOWN (2) on a claim without a token, and the holder's next
    claim through agentcoord gives it a new, larger one."""
    m1 = machines("m1")
    recorded = fixtures_dir / "peer-mixed"
    ours = json.loads((recorded / "ours-claim-with-token.json").read_text())
    path = "claims/acme/widgets/7.json"
    backend.plant(path, ours)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        lane = m1.json("heartbeat", "--agent-id", "holder-a", "--repo", "acme/widgets", "--target",
                       "7", "--keep-alive", "--watch-pid", str(proc.pid), "--ttl", "3",
                       "--renew-every", "0.2")["keep_alive"]
        assert lane["fenced_claim"] is True
        backend.plant(path, json.loads((recorded / "peer-renewed.json").read_text()))
        before = backend.read("heartbeats/holder-a.json")["updated_at"]
        wait_until(lambda: backend.read("heartbeats/holder-a.json")["updated_at"] != before, 5.0)
        row = next(r for r in m1.json("lanes")["lanes"] if r["agent_id"] == "holder-a")
        assert row["state"] == "active", row  # agent-coord's renewal is the same grant
        check = ("fence", "check", "--repo", "acme/widgets", "--target", "7", "--token",
                 str(ours["fencing_token"]))
        unknown = m1.ctl(*check)
        assert unknown.returncode == 2 and "carries no fencing token" in unknown.stderr.decode()
        renewed = m1.json("claim", "--agent-id", "holder-a", "--repo", "acme/widgets", "--target",
                          "7", "--batch-id", "b1", "--branch", "feat/7")
        assert renewed["claim"]["claimed_at"] == ours["claimed_at"]
        assert _token(renewed) > ours["fencing_token"]
        assert m1.ctl(*check).returncode == 3
        backend.plant(path, json.loads((recorded / "peer-took-over.json").read_text()))
        wait_until(lambda: next(r for r in m1.json("lanes")["lanes"]
                                if r["agent_id"] == "holder-a")["state"] == "fenced", 5.0)
    finally:
        proc.kill()
        proc.wait()
