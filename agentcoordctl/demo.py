"""demo: the spec's deterministic walkthrough, fully isolated.

It makes a temporary directory holding a fresh local state root AND its own
agentcoordd on its own socket, so no configured backend (env files, HTTP,
the machine's daemon) is ever touched; it removes everything on the way out.
Heartbeat ageing is simulated by backdating the heartbeat record in the
temporary root, which the demo owns. The demo's agents run with
AGENT_COORD_MACHINE_ID set, as the README asks of agents, so the terminal
closeout at the end is factual (closed_by.machine) and batch-audit counts it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from agentcoordctl import client, spec
from agentcoordctl.options import eprint
from agentcoordd import protocol as p
from agentcoordd.model.liveness import liveness
from agentcoordd.model.timefmt import format_ts

REPO, TARGET, HOLDER, CHALLENGER = "demo/widgets", "1", "demo-a", "demo-b"
BATCH, LANE, MACHINE = "demo-b1", "widgets-1", "demo-machine"
START_WAIT = 10.0


def _short_tmp() -> str | None:
    """$TMPDIR when a socket path under it stays short (Unix sockets allow ~104
    bytes), else /tmp."""
    base = tempfile.gettempdir()
    if len(base) <= 60:
        return base
    return "/tmp" if os.path.isdir("/tmp") else None


class _Demo:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="agentcoord-demo-", dir=_short_tmp())
        self.root = os.path.join(self.dir, "root")
        os.mkdir(self.root, 0o700)
        self.socket = os.path.join(self.dir, "d.sock")
        self.proc: Any = None
        # The caller environment the demo's requests carry: nothing configured.
        self.env = {"HOME": self.dir, "XDG_CONFIG_HOME": os.path.join(self.dir, "config"),
                    "XDG_STATE_HOME": os.path.join(self.dir, "state"),
                    "AGENT_COORD_MACHINE_ID": MACHINE}
        self.ok = True

    def start(self) -> None:
        import subprocess

        clean = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if os.environ.get(k)}
        clean["HOME"] = self.dir
        log = open(os.path.join(self.dir, "agentcoordd.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentcoordd.daemon.main", "--foreground", "--socket",
             self.socket, "--state-dir", os.path.join(self.dir, "daemon"), "--log-level", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=clean, cwd=self.dir,
        )
        log.close()
        deadline = time.monotonic() + START_WAIT
        while not client.daemon_running(self.socket, 0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the demo daemon did not start")
            time.sleep(0.01)

    def call(self, message: Any) -> p.Response:
        message.caller = p.Caller(env=self.env, cwd=self.dir, pid=os.getpid())
        message.selection = p.Selection(state_root=self.root)
        response, _ = client.request(message, timeout=15.0, autostart=False, path=self.socket)
        return response

    def backdate(self, *, updated_ago: dt.timedelta, expires_ago: dt.timedelta) -> str:
        """Age the holder's heartbeat (and its claim, acquired a minute before that beat:
        a beat older than the claim would say nothing about its holder); returns the
        heartbeat's liveness as a reader derives it."""
        now = dt.datetime.now(dt.timezone.utc)
        beat = self._rewrite(os.path.join("heartbeats", f"{HOLDER}.json"), {
            "updated_at": format_ts(now - updated_ago), "expires_at": format_ts(now - expires_ago)})
        self._rewrite(os.path.join("claims", *REPO.split("/"), f"{TARGET}.json"),
                      {"claimed_at": format_ts(now - updated_ago - dt.timedelta(minutes=1))})
        return liveness(beat["updated_at"], beat["expires_at"], now)

    def _rewrite(self, relative: str, changes: dict[str, str]) -> dict[str, Any]:
        path = os.path.join(self.root, relative)
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
        record.update(changes)
        tmp = path + ".demo-tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, path)
        return record

    def expect(self, step: str, response: p.Response, code: int) -> None:
        if response.exit_code == code:
            return
        self.ok = False
        eprint(f"demo: step '{step}' exited {response.exit_code}, expected {code}: "
               f"{response.error or ''}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.call(p.DaemonStop())
            except client.ClientError:
                self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - last resort
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def demo() -> None:
    """Isolated walkthrough: live-holder refusal, stale then dead heartbeat, takeover,
    terminal closeout, batch-audit."""
    d = _Demo()
    label = f"{REPO}#{TARGET}"
    try:
        d.start()
        print("agentcoord demo: temporary local state root and a private agentcoordd; "
              "no configured backend is used")
        print(f"   export AGENT_COORD_MACHINE_ID={MACHINE}   # every agent's machine, for factual closeouts")
        manifest = {"batch_id": BATCH, "repo": REPO,
                    "lanes": [{"name": LANE, "owner": HOLDER, "targets": [TARGET]}]}
        r = d.call(p.RegisterBatch(manifest=json.dumps(manifest).encode(), source="demo"))
        d.expect("register-batch", r, 0)
        print(f"0. register-batch {BATCH}: lane {LANE} (owner {HOLDER}, target {label}) (exit {r.exit_code})")
        r = d.call(p.Claim(agent_id=HOLDER, repo=REPO, target=TARGET, batch_id=BATCH, ttl=3600))
        d.expect("claim", r, 0)
        print(f"1. {HOLDER} claims {label} --batch-id {BATCH}: acquired (exit {r.exit_code})")
        r = d.call(p.Heartbeat(agent_id=HOLDER, repo=REPO, target=TARGET, ttl=900,
                               meta=p.Metadata(phase="implementing")))
        d.expect("heartbeat", r, 0)
        print(f"2. {HOLDER} heartbeats (ttl 15m): liveness live")
        r = d.call(p.Claim(agent_id=CHALLENGER, repo=REPO, target=TARGET))
        d.expect("refused while live", r, 3)
        print(f"3. {CHALLENGER} claims {label}: refused (exit {r.exit_code}) - {r.error}")
        state = d.backdate(updated_ago=dt.timedelta(minutes=30), expires_ago=dt.timedelta(minutes=15))
        print(f"4. {HOLDER} goes quiet: heartbeat expired 15m ago, within 4 x ttl: liveness {state}")
        r = d.call(p.Claim(agent_id=CHALLENGER, repo=REPO, target=TARGET))
        d.expect("refused while stale", r, 3)
        print(f"5. {CHALLENGER} claims {label}: refused (exit {r.exit_code}) - {r.error}")
        state = d.backdate(updated_ago=dt.timedelta(hours=2), expires_ago=dt.timedelta(minutes=105))
        print(f"6. {HOLDER} stays quiet: updated 2h ago, past 4 x ttl: liveness {state}")
        r = d.call(p.Claim(agent_id=CHALLENGER, repo=REPO, target=TARGET, batch_id=BATCH))
        d.expect("takeover", r, 0)
        action = (r.payload or {}).get("action", "?") if isinstance(r.payload, dict) else "?"
        print(f"7. {CHALLENGER} claims {label}: {action.replace('_', ' ')} (exit {r.exit_code})")
        r = d.call(p.Release(agent_id=CHALLENGER, repo=REPO, target=TARGET, terminal="done"))
        d.expect("terminal release", r, 0)
        for warning in r.warnings:
            eprint(f"warning: {warning}")
        event = ((r.payload or {}).get("lane_closed") or {}).get("event") or {} \
            if isinstance(r.payload, dict) else {}
        closer = event.get("closed_by") or {}
        print(f"8. {CHALLENGER} releases --terminal done: lane {event.get('lane', '?')} closed by "
              f"{closer.get('agent_id', '?')} on machine {closer.get('machine', '?')} (exit {r.exit_code})")
        r = d.call(p.BatchAudit(batch_id=BATCH))
        d.expect("batch-audit", r, 0)
        verdict = (r.payload or {}).get("verdict", "?") if isinstance(r.payload, dict) else "?"
        print(f"9. batch-audit {BATCH}: {verdict} (exit {r.exit_code})")
    except (client.ClientError, RuntimeError, OSError) as exc:
        d.ok = False
        eprint(f"demo failed: {getattr(exc, 'message', exc)}")
    finally:
        d.stop()
    if d.ok:
        print("demo complete: temporary state root and daemon removed")
    raise spec.Exit(0 if d.ok else p.EXIT_OPERATIONAL)


COMMANDS = (spec.Command(
    ("demo",), "Isolated walkthrough: live-holder refusal, stale then dead heartbeat, takeover, "
    "terminal closeout, batch-audit.",
    (), demo),)
