"""One contending agent: ROUNDS × (claim a shared target → hold → record-event → release),
over a raw socket to agentcoordd. Run as a subprocess by scenarios.contention().

While it holds a grant it owns `<markers>/<target>` (O_CREAT|O_EXCL): finding the
marker already there means another process believes it holds the same target
— a double grant. Prints one JSON line: counts and the acknowledged event paths.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import msgspec

from agentcoordd import protocol as p


class Conn:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self.decoder = p.client_decoder()
        self.send(p.Hello(protocol=p.PROTOCOL_VERSION, client="contender"))
        assert isinstance(self.recv(), p.Welcome)

    def send(self, obj: object) -> None:
        self.sock.sendall(p.frame(msgspec.msgpack.encode(obj)))

    def recv(self) -> object:
        return self.decoder.decode(p.recv_frame(self.sock))

    def call(self, request: object) -> p.Response:
        self.send(request)
        while True:
            reply = self.recv()
            if isinstance(reply, p.Response):
                return reply


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--targets", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--markers", required=True)
    ap.add_argument("--env-json", default="{}")
    ap.add_argument("--state-root", default=None)
    args = ap.parse_args()
    caller = p.Caller(env=json.loads(args.env_json), cwd="/", pid=os.getpid())
    selection = p.Selection(state_root=args.state_root) if args.state_root else p.Selection()
    targets = args.targets.split(",")
    conn = Conn(args.socket)
    out = {"grants": 0, "refused": 0, "errors": 0, "double_grants": 0, "release_failures": 0,
           "acked": [], "error_samples": []}
    index = sum(map(ord, args.agent))  # agents start on different targets
    for _ in range(args.rounds):
        target = targets[index % len(targets)]
        index += 1
        common = dict(caller=caller, selection=selection, timeout=30.0)
        got = conn.call(p.Claim(agent_id=args.agent, repo=args.repo, target=target,
                                batch_id=args.batch, **common))
        if got.exit_code == 3:
            out["refused"] += 1
            continue
        if got.exit_code != 0:
            out["errors"] += 1
            if len(out["error_samples"]) < 3:
                out["error_samples"].append(got.error)
            continue
        out["grants"] += 1
        marker = os.path.join(args.markers, target)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            mine = True
        except FileExistsError:
            out["double_grants"] += 1
            mine = False
        event = conn.call(p.RecordEvent(batch_id=args.batch, type="work", agent_id=args.agent,
                                        repo=args.repo, target=target, message="held", **common))
        if event.exit_code == 0:
            out["acked"].append(event.payload["path"])
        else:
            out["errors"] += 1
        time.sleep(0.001)
        if mine:
            os.unlink(marker)
        released = conn.call(p.Release(agent_id=args.agent, repo=args.repo, target=target,
                                       **common))
        if released.exit_code != 0:
            out["release_failures"] += 1
            if len(out["error_samples"]) < 3:
                out["error_samples"].append(released.error)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
