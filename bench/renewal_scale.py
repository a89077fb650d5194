"""Renewal at scale: N keep-alive lanes on the local store, one real agentcoordd.

    .venv/bin/python bench/renewal_scale.py                 # 10,000 lanes, TTL 120 s, 4 minutes
    .venv/bin/python bench/renewal_scale.py --lanes 1000 --duration 60   # a quick run

Registers the lanes over the wire (heartbeat --keep-alive, as ctl would), then
lets the daemon renew them with no further calls for --duration seconds and
reports:
* renewal lag p50/p99/max (how late each renewal finished after its due time,
  from the daemon's own measurements, `lanes --json` summary);
* expiries missed: heartbeat files whose expires_at had passed at any of the
  periodic scans of all heartbeat files (must be 0);
* daemon CPU % of one core over the measured window (/proc/<pid>/stat) and
  peak RSS (/proc/<pid>/status VmHWM).

Targets (issue 5): 0 missed, p99 lag < 1 s, < 15 % of one core, < 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from agentcoordd import protocol as p
from agentcoordd.model.timefmt import parse_ts

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the process so far."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2:].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS



def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Client:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(path)
        self.decoder = p.client_decoder()
        self.send(p.Hello(protocol=p.PROTOCOL_VERSION, client="bench"))
        assert isinstance(self.recv(), p.Welcome)

    def send(self, message: object) -> None:
        self.sock.sendall(p.frame(msgspec.msgpack.encode(message)))

    def recv(self) -> object:
        return self.decoder.decode(p.recv_frame(self.sock))

    def call(self, message: object) -> p.Response:
        self.send(message)
        while True:
            reply = self.recv()
            if isinstance(reply, p.Response):
                return reply


def scan_expired(root: Path) -> tuple[int, int]:
    """(expired, total) heartbeat files right now."""
    now = time.time()
    expired = total = 0
    for entry in os.scandir(root / "heartbeats"):
        if not entry.name.endswith(".json"):
            continue
        total += 1
        with open(entry.path, "rb") as fh:
            record = json.loads(fh.read())
        expires = parse_ts(record.get("expires_at"))
        if expires is None or expires.timestamp() <= now:
            expired += 1
    return expired, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=10_000)
    parser.add_argument("--ttl", type=int, default=120)
    parser.add_argument("--duration", type=float, default=240.0, help="measured seconds (default 240)")
    parser.add_argument("--scan-every", type=float, default=10.0)
    parser.add_argument("--pipeline", type=int, default=64, help="requests in flight while registering")
    parser.add_argument("--dir", default="/tmp",
                        help="where the temp state root goes (its filesystem matters: fsync)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="acbench.", dir=args.dir))
    root, state, sock_path = base / "root", base / "state", str(base / "d.sock")
    root.mkdir()
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
           "XDG_STATE_HOME": str(base / "xs")}
    log = open(base / "daemon.log", "wb")
    daemon = subprocess.Popen([sys.executable, "-m", "agentcoordd.daemon.main", "--foreground",
                               "--socket", sock_path, "--state-dir", str(state), "--log-level",
                               "warning"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while not os.path.exists(sock_path):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("daemon did not start")
            time.sleep(0.02)
        client = Client(sock_path)
        caller = p.Caller(env={"HOME": str(base)}, cwd=str(base), pid=os.getpid())
        selection = p.Selection(state_root=str(root))
        keep = p.KeepAlive(idle_timeout=10 * 86400.0)
        started = time.monotonic()
        sent = received = 0
        while received < args.lanes:  # pipelined: up to --pipeline requests in flight
            while sent < args.lanes and sent - received < args.pipeline:
                client.send(p.Heartbeat(agent_id=f"bench-{sent:05d}", ttl=args.ttl, keep_alive=keep,
                                        caller=caller, selection=selection))
                sent += 1
            reply = client.recv()
            if isinstance(reply, p.Response):
                if reply.exit_code != 0:
                    raise SystemExit(f"registration failed: {reply.error}")
                received += 1
        registered_in = time.monotonic() - started
        print(f"registered {args.lanes} lanes in {registered_in:.1f}s; measuring {args.duration:g}s",
              file=sys.stderr)

        split0 = cpu_split(daemon.pid)
        cpu0, wall0 = sum(split0), time.monotonic()
        scans = missed = 0
        end = wall0 + args.duration
        next_scan = wall0
        while time.monotonic() < end:
            if time.monotonic() >= next_scan:
                expired, total = scan_expired(root)
                missed += expired
                scans += 1
                next_scan += args.scan_every
            time.sleep(0.2)
        split1 = cpu_split(daemon.pid)
        cpu1, wall1 = sum(split1), time.monotonic()
        expired, total = scan_expired(root)
        missed += expired
        scans += 1
        listing = client.call(p.Lanes(caller=caller))
        summary = listing.payload["summary"]
        rss = peak_rss_mb(daemon.pid)
        result = {
            "lanes": args.lanes, "ttl": args.ttl, "measured_seconds": round(wall1 - wall0, 1),
            "registration_seconds": round(registered_in, 1),
            "renewals": summary["renewals"], "renewal_failures": summary["renewal_failures"],
            "lag_p50_s": summary["lag_p50"], "lag_p99_s": summary["lag_p99"],
            "lag_max_s": summary["lag_max"], "expiry_scans": scans, "expiries_missed": missed,
            "live_lanes": summary["live"], "failing_lanes": summary["failing"],
            "daemon_cpu_percent": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2),
            "daemon_cpu_user_percent": round(100 * (split1[0] - split0[0]) / (wall1 - wall0), 2),
            "daemon_cpu_system_percent": round(100 * (split1[1] - split0[1]) / (wall1 - wall0), 2),
            "daemon_peak_rss_mb": round(rss, 1),
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for key, value in result.items():
                print(f"{key:24} {value}")
        ok = (missed == 0 and (summary["lag_p99"] or 0) < 1.0
              and result["daemon_cpu_percent"] < 15 and rss < 200)
        print("targets met" if ok else "TARGETS MISSED", file=sys.stderr)
        return 0 if ok else 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
