"""Differential tester: agent-coord and agentcoordctl side by side on generated
command sequences (scripts/differential is its command line).

A sequence is a list of steps - a state file planted in the root (`Put`), a
file planted in the work dir (`WFile`, e.g. a batch manifest) or a command
(`Cmd`). Each sequence runs on two fresh work dirs laid out exactly as the
conformance kit's drivers lay them out (own state root, HOME and XDG dirs, the
local backend), one per tool, both from the same start time T0; the kit's
normalize.py then renders each into the strict and messages files, so times,
event ids, archive digests and paths are masked the same way the recorded
scenarios are. Compared: exit codes, JSON stdout, every state file (harness.
compare), text stdout line by line and the first stderr line of agent-coord
(which must appear in one of ours, as in test_messages).

Differences documented in docs/compat.md are allowed by anchor (ALLOWED:
one entry per anchor, each naming the command and exactly what may differ).
Hypothesis generates the sequences and shrinks a difference to a minimal one,
which `reproducer` prints as a scenario in the kit's bash format, ready for
tests/fixtures/conformance/differential.sh (recorded there from agent-coord
with MODE=record).

The peer is never needed by the default suite: test_differential.py runs the
harness with agentcoordctl on both sides (it must find nothing).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import strategies as st

from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError

from conformance import allowed
from conformance.harness import (
    EVERY_SCENARIO,
    FIXTURES,
    Difference,
    compare,
    parse_messages,
    parse_strict,
    text_differences,
    unified,
)

_spec = importlib.util.spec_from_file_location("conformance_normalize", FIXTURES / "normalize.py")
assert _spec is not None and _spec.loader is not None
normalize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(normalize)

STEP_TIMEOUT = 60.0
WORK_DIR_MARK = "{W}"  # in a Cmd argument: the sequence's work dir ("$W" in bash)


# ---------------------------------------------------------------- sequences

@dataclasses.dataclass(frozen=True)
class Put:
    """A state file planted in the root ({{NOW-2h}} placeholders, as `put`)."""
    rel: str
    text: str


@dataclasses.dataclass(frozen=True)
class WFile:
    """A file in the work dir, outside the root (as `wfile`); not a step."""
    name: str
    text: str


@dataclasses.dataclass(frozen=True)
class Cmd:
    args: tuple[str, ...]

    @property
    def command(self) -> str:
        return self.args[0] if self.args else ""

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(sorted({a.split("=", 1)[0] for a in self.args[1:] if a.startswith("--")}))


Item = Put | WFile | Cmd


# ---------------------------------------------------------------- running

def _env(work: Path, path_first: str | None, extra: dict[str, str]) -> dict[str, str]:
    """The drivers' environment: no backend, socket or daemon variables of the
    caller; the work dir's own root, HOME and XDG dirs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENT_COORD_", "AGENTCOORD_", "XDG_")) and k != "CODEX_THREAD_ID"}
    if path_first:
        env["PATH"] = os.pathsep.join([path_first, env.get("PATH", os.defpath)])
    env.update(AGENT_COORD_STATE_ROOT=str(work / "root"), HOME=str(work / "home"),
               XDG_CONFIG_HOME=str(work / "xdg"), XDG_STATE_HOME=str(work / "xdgstate"))
    env.update(extra)
    return env


_C_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def bash_quote(arg: str) -> str:
    """One shell word, on one line (like bash's printf %q): $'...' when the value
    holds characters that are not printable."""
    if arg.isprintable():
        return shlex.quote(arg)
    return "$'" + "".join(_C_ESCAPES.get(ch) or (ch if ch.isprintable() else f"\\x{ord(ch):02x}"
                                                 if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
                          for ch in arg) + "'"


def _put(base: Path, rel: str, text: str, t0: int) -> None:
    import datetime as dt
    start = dt.datetime.fromtimestamp(t0, dt.timezone.utc)

    def sub(m: re.Match[str]) -> str:
        if not m.group(1):
            return normalize.fmt(start)
        delta = int(m.group(2)) * normalize.UNIT[m.group(3)]
        return normalize.fmt(start + dt.timedelta(seconds=delta if m.group(1) == "+" else -delta))

    path = base / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(normalize.PLACEHOLDER_RE.sub(sub, text), encoding="utf-8")


def run_sequence(cli: Sequence[str], items: Sequence[Item], t0: int, name: str,
                 path_first: str | None = None, extra_env: dict[str, str] | None = None
                 ) -> tuple[str, str]:
    """Run `items` with `cli` on a fresh work dir; (strict text, messages text)."""
    work = Path(tempfile.mkdtemp(prefix="acdiff."))
    try:
        for sub in ("root", "home", "xdg", "xdgstate"):
            (work / sub).mkdir()
        env = _env(work, path_first, extra_env or {})
        steps = []
        for item in items:
            if isinstance(item, WFile):
                _put(work, item.name, item.text, t0)
                continue
            i = len(steps) + 1
            if isinstance(item, Put):
                _put(work / "root", item.rel, item.text, t0)
                steps.append({"i": i, "kind": "put", "rc": "-", "env": [], "args": f"put {item.rel}"})
                continue
            args = [a.replace(WORK_DIR_MARK, str(work)) for a in item.args]
            with open(work / f"step{i}.out", "wb") as out, open(work / f"step{i}.err", "wb") as err:
                try:
                    rc = subprocess.run([*cli, *args], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=err, timeout=STEP_TIMEOUT).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            steps.append({"i": i, "kind": "run", "rc": str(rc), "env": [],
                          "args": " ".join(bash_quote(a) for a in args)})
        (work / "meta.json").write_text(json.dumps(
            {"description": "generated", "roots": [["<ROOT>", str(work / "root")]], "steps": steps}))
        normalize.render(str(work), str(t0), name)
        return ((work / "strict.txt").read_text(encoding="utf-8"),
                (work / "messages.txt").read_text(encoding="utf-8"))
    finally:
        # removing the work dir also ends an autostarted agentcoordd (its state dir is gone)
        subprocess.run(["rm", "-rf", str(work)], check=False)


# ---------------------------------------------------------------- comparing

@dataclasses.dataclass(frozen=True)
class Found:
    """One difference of one sequence: the command of its step and what differs."""
    cmd: Cmd | None
    diff: Difference
    peer_stderr: str = ""  # what agent-coord printed on stderr in this step
    sequence: tuple[Cmd, ...] = ()  # every command of the sequence (for state differences)

    @property
    def signature(self) -> tuple[str, ...]:
        """What makes two differences the same one: the command and its option
        names, the kind, the JSON path (list indices as *) or state family."""
        d = self.diff
        path = ".".join("*" if p.isdigit() else p for p in d.path)
        family = ""
        if d.file:
            parts = d.file.split("/")
            family = "/".join(parts[1:3] if parts[1] == "archive" else parts[1:2])
        cmd = self.cmd.command if self.cmd else "(state)"
        opts = ",".join(self.cmd.options) if self.cmd else ""
        return (cmd, opts, d.kind, path, family)

    def describe(self) -> str:
        where = " ".join(self.cmd.args) if self.cmd else "final state"
        d = self.diff
        if d.kind == "stdout-text":
            what = f"step {d.step}: text stdout differs\n{unified(d.golden, d.ours, 'agent-coord')}"
        elif d.kind == "stderr":
            what = (f"step {d.step}: agent-coord's first stderr line is not in ours\n"
                    f"  agent-coord: {d.golden}\n  ours: {d.ours or '(no stderr)'}")
        else:
            what = d.describe()
        return f"[{where}] {what}"


@dataclasses.dataclass(frozen=True)
class DifferentialAllowance:
    """A documented difference (docs/compat.md `compat`) as it shows in generated
    sequences: for `command` (None: any), differences of `kinds` whose JSON
    path matches `paths` (regexes on the dotted path; empty: any path) and
    whose step passes `when` (a predicate on the command); for text stdout,
    `lines` (regexes) must each match every line only one of the tools printed;
    for agent-coord's first stderr line, one of `lines` must be found in it."""

    compat: str
    why: str
    command: str | None
    kinds: frozenset[str]
    paths: tuple[str, ...] = ()
    when: Callable[[Cmd], bool] | None = None
    lines: tuple[str, ...] = ()
    peer_said: str | None = None  # a regex agent-coord's stderr of the step must match
    # state files (regexes on "<ROOT>/..."): covered when a command of the sequence
    # matches `command` and `when` (a state difference belongs to no single step)
    files: tuple[str, ...] = ()

    def covers(self, found: Found) -> bool:
        d = found.diff
        if d.file is not None:
            return (d.kind in self.kinds and any(re.fullmatch(f, d.file) for f in self.files)
                    and any(c.command == self.command and (self.when is None or self.when(c))
                            for c in found.sequence))
        if d.kind not in self.kinds or (
                self.peer_said is not None and not re.search(self.peer_said, found.peer_stderr, re.M)):
            return False
        if self.lines and d.kind == "stderr" and not any(re.search(p, d.golden) for p in self.lines):
            return False
        if self.lines and d.kind == "stdout-text":
            golden, ours = d.golden.splitlines(), d.ours.splitlines()
            changed = [x for x in golden if x not in ours] + [x for x in ours if x not in golden]
            if not all(any(re.fullmatch(p, x) for p in self.lines) for x in changed):
                return False
        if self.command is not None and (found.cmd is None or found.cmd.command != self.command):
            return False
        if self.when is not None and (found.cmd is None or not self.when(found.cmd)):
            return False
        if d.kind in ("stdout-text", "stderr"):
            return True
        dotted = ".".join(d.path)
        return not self.paths or any(re.fullmatch(p, dotted) for p in self.paths)


def _has(*options: str) -> Callable[[Cmd], bool]:
    return lambda cmd: any(o in cmd.options for o in options)


# agent-coord died with a Ruby backtrace
RUBY_CRASH = r"\.rb:\d+:in '|agent-coord:\d+:in '"


def _valid_agent_id(cmd: Cmd) -> bool:
    args = list(cmd.args)
    if "--agent-id" not in args or args.index("--agent-id") + 1 >= len(args):
        return True
    try:
        ids.agent_id(args[args.index("--agent-id") + 1])
    except UsageError:
        return False
    return True


# Fields every scenario may add (allowed.STRICT's FieldAddedEverywhere entries) are
# taken over as they are; the rest are one entry per compat.md anchor.
EVERYWHERE = [a for a in allowed.STRICT if a.scenario == EVERY_SCENARIO]
_JSON_WRITES = ("claim", "release", "heartbeat", "record-event")
ALLOWED: list[DifferentialAllowance] = [
    DifferentialAllowance(
        compat="#extra-options", command=None, kinds=frozenset({"stdout-json-extra", "stdout-text"}),
        when=lambda cmd: cmd.command in _JSON_WRITES and "--json" in cmd.options,
        why="--json on claim, release, heartbeat and record-event prints the written record "
            "(agent-coord ignores the flag there and prints its text line)"),
    DifferentialAllowance(
        compat="#text-scope-line", command="status", kinds=frozenset({"stdout-text"}),
        lines=(r"scope: .*", r"- not checked in (batch|target) scope", r"degraded"),
        why="a scoped text status names what it did not read on one `scope:` line, "
            "not under `degraded`"),
    DifferentialAllowance(
        compat="#version-json-keys", command="version", kinds=frozenset({"key-extra", "stdout-text"}),
        paths=("client_version", "daemon_version", "daemon_pid", "protocol_version",
               "daemon_protocol_version"),
        lines=(r"agent-coord \S+", r"agentcoordctl \S+", r"daemon_version: .*", r"daemon_pid: .*",
               r"protocol_version: .*"),
        why="client and daemon versions are what a mismatch report needs"),
    DifferentialAllowance(
        compat="#one-bad-record", command=None, peer_said=RUBY_CRASH + r"|^state unreadable: ",
        when=lambda cmd: cmd.command != "gc",
        kinds=frozenset({"exit", "stdout-text", "stderr", "stdout-json-extra"}),
        why="one record that is not JSON makes agent-coord's listing UNKNOWN (exit 2), one that "
            "is JSON but not an object crashes it (a Ruby TypeError, exit 1); ours names it "
            "and leaves it out"),
    DifferentialAllowance(
        compat="#gc-differences", command="gc", peer_said=RUBY_CRASH,
        kinds=frozenset({"exit", "stdout-text", "stderr", "stdout-json-extra"}),
        why="an unreadable or non-object hot record fails agent-coord's plan (a Ruby "
            "backtrace, exit 1); ours leaves it untouched with a warning"),
    DifferentialAllowance(
        compat="#agent-ids-validated-on-claim", command="claim",
        when=lambda cmd: not _valid_agent_id(cmd),
        kinds=frozenset({"exit", "stdout-text", "stdout-json-extra", "file-missing", "stderr"}),
        files=(r"<ROOT>/claims/.*",),
        why="claim refuses an agent id that heartbeat would refuse (exit 1, nothing written)"),
    DifferentialAllowance(
        compat="#audit-malformed-lanes", command="batch-audit", kinds=frozenset({"value"}),
        paths=(r"lanes\.\d+\.malformed",),
        why="a lane named with ':' or a duplicated name is flagged malformed"),
    DifferentialAllowance(
        compat="#text-escapes", command=None, kinds=frozenset({"stderr", "stdout-text"}),
        when=lambda cmd: not all(a.isprintable() for a in cmd.args),
        why="control and bidi characters of a value are escaped in text output (\\t, \\x1b)"),
    DifferentialAllowance(
        compat="#lane-holders", command="status", kinds=frozenset({"stdout-text"}),
        lines=(r"  - lane \S+ owner .* blocked_on \S+( state .*)?",),
        why="a lane line ends with the lane's own state and holder (` state held holder a live`)"),
    DifferentialAllowance(
        compat="#batch-records-on-the-manifest", command="status", kinds=frozenset({"stdout-text"}),
        lines=(r"  - (completed|blocked): .*", r"  - usage .*"),
        why="a batch's records (blocker, usage, completion) in status text"),
    DifferentialAllowance(
        compat="#ruby-error-texts", command=None, kinds=frozenset({"stderr"}),
        lines=(r" @ rb_\w+ - ", r"JSON invalid: unexpected token at "),
        why="Ruby names its syscall wrapper (rb_sysopen) and quotes its JSON parser; ours "
            "does neither"),
]


# Volatile parts normalize.py leaves alone because agent-coord never prints them:
# our daemon's pid and a grant's fencing token (time-derived).
_VOLATILE_TEXT = (re.compile(r"\bpid \d+"), re.compile(r"\bfencing token \d+"))


def _mask_volatile(messages: str) -> str:
    for rx in _VOLATILE_TEXT:
        messages = rx.sub(lambda m: m.group(0).rsplit(" ", 1)[0] + " <N>", messages)
    return messages


def _volatile_value(d: Difference) -> bool:
    """A grant's fencing token, a completion report's duration: time-derived values."""
    return d.kind == "value" and bool(d.path) and (
        d.path[-1] == "fencing_token" or (d.path[-1] == "duration" and "completion" in d.path))


def differences(cmds: dict[int, Cmd], name: str, peer: tuple[str, str], ours: tuple[str, str]
                ) -> list[Found]:
    """Every difference not covered by an allowance."""
    diffs = [d for d in compare(name, parse_strict(peer[0]), parse_strict(ours[0]))
             if not _volatile_value(d)]
    diffs += text_differences(name, _mask_volatile(peer[1]), _mask_volatile(ours[1]))
    peer_stderr = {i: "\n".join(step.stderr) for i, step in parse_messages(peer[1]).items()}
    left = []
    for d in diffs:
        if any(a.covers(d) for a in EVERYWHERE):
            continue
        found = Found(cmds.get(d.step) if d.step is not None else None, d,
                      peer_stderr.get(d.step, "") if d.step is not None else "", tuple(cmds.values()))
        if not any(a.covers(found) for a in ALLOWED):
            left.append(found)
    return left


@dataclasses.dataclass
class Differential:
    """The two tools and the counters of one session."""

    peer: list[str]
    ours: list[str]
    path_first: str | None = None
    # the peer's wrapper unpacks its Ruby under $HOME/.cache unless told where it is
    peer_env: dict[str, str] = dataclasses.field(default_factory=dict)
    sequences: int = 0
    steps: int = 0
    seconds: float = 0.0

    def run(self, items: Sequence[Item]) -> list[Found]:
        started = time.monotonic()
        t0 = int(time.time())
        name = "generated"
        cmds, n = {}, 0
        for item in items:
            if isinstance(item, (Put, Cmd)):
                n += 1
                if isinstance(item, Cmd):
                    cmds[n] = item
        with ThreadPoolExecutor(max_workers=2) as pool:
            p = pool.submit(run_sequence, self.peer, items, t0, name, self.path_first, self.peer_env)
            o = pool.submit(run_sequence, self.ours, items, t0, name, self.path_first)
            peer, ours = p.result(), o.result()
        self.sequences += 1
        self.steps += len(cmds)
        self.seconds += time.monotonic() - started
        return differences(cmds, name, peer, ours)


# ---------------------------------------------------------------- reproducers

def _bash_arg(arg: str) -> str:
    if WORK_DIR_MARK in arg:
        head, _, tail = arg.partition(WORK_DIR_MARK)
        return (bash_quote(head) if head else "") + '"$W"' + (bash_quote(tail) if tail else "")
    return bash_quote(arg)


def _heredoc(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def reproducer(name: str, description: str, items: Sequence[Item]) -> str:
    """The sequence as a scenario of the kit's drivers (differential.sh)."""
    lines = [f"scenario {name}", f"{name}() {{", f"  begin {name} {shlex.quote(description)}"]
    for item in items:
        if isinstance(item, Put):
            lines.append(f"  put {shlex.quote(item.rel)} <<'EOF'\n{_heredoc(item.text)}EOF")
        elif isinstance(item, WFile):
            lines.append(f"  wfile {shlex.quote(item.name)} <<'EOF'\n{_heredoc(item.text)}EOF")
        else:
            lines.append("  run -- " + " ".join(_bash_arg(a) for a in item.args))
    lines += ["  finish", "}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- generation

AGENTS = ["agent-a", "agent-b", "", "../x", "a" * 64, "a" * 65, "agent-\u00e9", "a\tb", "-a"]
REPOS = ["acme/widgets", "acme/widgets", "acme", "", "acme/w\u00eddgets", "acme/widgets/x"]
TARGETS = ["1", "2", "1", "0", "-1", "abc", "9" * 20, ""]
BATCHES = ["b1", "b1", "b2", "", "../b", "b" * 64, "b" * 65, "b\u00e9"]
TTLS = ["60", "3600", "0", "-5", "abc", "1.5"]
TERMINALS = ["done", "abandoned", "superseded", "bogus", ""]
EVENT_TYPES = ["note", "help_requested", "error", "human_intervention", "escalation_requested",
               "lane_closed", "claim.acquired", "bogus", ""]
TEXTS = ["hello", "", "caf\u00e9 \u2603", "line\nbreak", "tab\there", "x" * 300]
HB_STATUSES = ["in_progress", "done", "blocked", "waiting", "bogus", ""]

_MANIFEST_LANES = [
    '{"name":"backend","owner":"agent-a","targets":["1"]}',
    '{"name":"docs","owner":"agent-b","targets":["2"],"depends_on":["b1:backend"]}',
    '{"name":"noowner","targets":["3"]}',
    '{"name":"","owner":"agent-a","targets":["4"]}',
    '{"name":"bad lane!","owner":"agent-a"}',
    '"not-an-object"',
    '{"name":"backend","owner":"agent-a","targets":["1"],"custom":"x"}',
]
MANIFESTS = st.one_of(
    st.builds(lambda batch, lanes, extra: '{"batch_id":%s,"repo":"acme/widgets"%s,"lanes":[%s]}' % (
        json.dumps(batch), extra, ",".join(lanes)),
        st.sampled_from(["b1", "b2", "", "../b"]),
        st.lists(st.sampled_from(_MANIFEST_LANES), max_size=3),
        st.sampled_from(["", ',"objective":"caf\u00e9 \u2603"', ',"custom":{"k":1}', ',"synthetic":true'])),
    st.sampled_from(["not json{", "[]", '{"lanes":[]}', '{"batch_id":"b1"}', ""]),
)

# Records planted in the root: live, old, terminal, stray, unparseable, non-object,
# archived, synthetic.
PLANTS = [
    Put("claims/acme/widgets/1.json", '{"schema_version":1,"repo":"acme/widgets","target":"1","agent_id":"agent-a","batch_id":"b1","status":"active","claimed_at":"{{NOW-60m}}","updated_at":"{{NOW-60m}}","expires_at":"{{NOW+180m}}"}'),
    Put("claims/acme/widgets/1.json", '{"schema_version":1,"repo":"acme/widgets","target":"1","agent_id":"agent-a","batch_id":"b1","status":"released","claimed_at":"{{NOW-11d}}","updated_at":"{{NOW-10d}}","expires_at":"{{NOW-10d}}","released_by":"agent-a","released_at":"{{NOW-10d}}"}'),
    Put("claims/acme/widgets/2.json", '{"schema_version":1,"repo":"acme/widgets","target":"2","agent_id":"agent-a","status":"active","claimed_at":"{{NOW-5h}}","updated_at":"{{NOW-5h}}","expires_at":"{{NOW-1h}}"}'),
    Put("claims/acme/widgets/2.json", '{"schema_version":1,"repo":"acme/widgets","target":"2","status":"active","updated_at":"{{NOW-5h}}","expires_at":"{{NOW+1h}}"}'),
    Put("claims/acme/widgets/3.json", "not json{"),
    Put("claims/acme/widgets/3.json", "[1,2]"),
    Put("heartbeats/agent-a.json", '{"schema_version":1,"agent_id":"agent-a","status":"in_progress","updated_at":"{{NOW-1m}}","expires_at":"{{NOW+14m}}"}'),
    Put("heartbeats/agent-b.json", '{"schema_version":1,"agent_id":"agent-b","status":"done","updated_at":"{{NOW-3d}}","expires_at":"{{NOW-4305m}}"}'),
    Put("heartbeats/stray.txt", "stray"),
    Put("batches/b1.json", '{"schema_version":1,"batch_id":"b1","repo":"acme/widgets","lanes":[{"name":"backend","owner":"agent-a","targets":["1"],"status":"done","terminal":"done","closed_at":"{{NOW-10d}}","closed_by":{"agent_id":"agent-a","machine":"m1"},"workspace":"default"}],"registered_at":"{{NOW-11d}}","updated_at":"{{NOW-10d}}","status":"completed","completed_at":"{{NOW-10d}}"}'),
    Put("batches/b2.json", '{"schema_version":1,"batch_id":"b2","repo":"acme/widgets","lanes":[{"name":"backend","owner":"agent-a","targets":["1"]}],"registered_at":"{{NOW-2h}}","updated_at":"{{NOW-2h}}","synthetic":true,"synthetic_kind":"smoke"}'),
    Put("batches/b2.json", '{"schema_version":1,"batch_id":"b2","lanes":[],"registered_at":"{{NOW}}","updated_at":"{{NOW}}"}'),
    Put("events/b1/20200101T000000.000001Z-00000001.json", '{"schema_version":1,"event_id":"20200101T000000.000001Z-00000001","batch_id":"b1","type":"claim.acquired","agent_id":"agent-a","repo":"acme/widgets","target":"1","at":"{{NOW-11d}}"}'),
    Put("events/nope/20200101T000000.000001Z-0000000a.json", '{"schema_version":1,"event_id":"20200101T000000.000001Z-0000000a","batch_id":"nope","type":"note","message":"orphan","synthetic":true,"at":"{{NOW-5d}}"}'),
    Put("archive/claims/acme/widgets/1.json", '{"schema_version":1,"record_family":"archived_record","source_path":"claims/acme/widgets/1.json","reason":"terminal_claim","synthetic":false,"archived_at":"{{NOW-40d}}","delete_after":"{{NOW-10d}}","data":{"repo":"acme/widgets","target":"1","status":"released"}}'),
    Put("archive/claims/acme/widgets/9.json", '{"schema_version":1,"record_family":"archived_record","source_path":"claims/acme/widgets/9.json","reason":"terminal_claim","synthetic":false,"archived_at":"{{NOW-1d}}","delete_after":"{{NOW+29d}}","data":{"repo":"acme/widgets","target":"9","status":"released"}}'),
]


def _opt(name: str, values: Sequence[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.one_of(st.just(()), st.sampled_from(values).map(lambda v: (name, v)))


def _flag(name: str) -> st.SearchStrategy[tuple[str, ...]]:
    return st.sampled_from([(), (name,)])


def _cmd(command: str, *parts: st.SearchStrategy[tuple[str, ...]]) -> st.SearchStrategy[Cmd]:
    return st.tuples(*parts).map(lambda ps: Cmd((command, *[a for p in ps for a in p])))


def _req(name: str, values: Sequence[str]) -> st.SearchStrategy[tuple[str, ...]]:
    """An option usually given (a valid-looking value most of the time)."""
    return st.one_of(st.sampled_from(values).map(lambda v: (name, v)), st.just(()))


_TARGET = st.tuples(_req("--repo", REPOS), _req("--target", TARGETS)).map(lambda t: t[0] + t[1])
JSON = _flag("--json")

COMMANDS = st.one_of(
    _cmd("claim", _req("--agent-id", AGENTS), _TARGET, _opt("--batch-id", BATCHES),
         _opt("--branch", ["feat/1", ""]), _opt("--ttl", TTLS), JSON),
    _cmd("heartbeat", _req("--agent-id", AGENTS), st.one_of(st.just(()), _TARGET),
         _opt("--status", HB_STATUSES), _opt("--ttl", TTLS), JSON),
    _cmd("release", _req("--agent-id", AGENTS), _TARGET, _opt("--batch-id", BATCHES),
         _opt("--terminal", TERMINALS), _opt("--handoff-to", ["agent-b", ""]),
         _opt("--handoff-note", TEXTS), _opt("--pr-state", ["merged", "closed", "bogus"]), JSON),
    _cmd("status", st.one_of(st.just(()), _TARGET, _req("--batch-id", BATCHES),
                             st.just(("--include-archived",))), JSON),
    _cmd("register-batch", st.just(("--file", WORK_DIR_MARK + "/m.json")), JSON),
    _cmd("record-event", _req("--batch-id", BATCHES), _req("--type", EVENT_TYPES),
         _opt("--lane", ["backend", "docs", "nope"]), _opt("--agent-id", AGENTS[:2]),
         _opt("--message", TEXTS), _opt("--reason", ["question", "bogus"]),
         _opt("--severity", ["P1", "P9"]), _opt("--category", ["build"]),
         _opt("--kind", ["takeover", "bogus"]), JSON),
    _cmd("batch-audit", _req("--batch-id", BATCHES), JSON),
    _cmd("gc", st.sampled_from([("--dry-run",), ("--execute",), ("--execute",), (),
                                ("--dry-run", "--execute")]),
         _opt("--hot-days", ["0", "7", "-1", "x"]), _opt("--archive-days", ["0", "30"]),
         _opt("--prefix", ["claims", "events", "bogus"]), JSON),
    _cmd("version", JSON),
)


@st.composite
def sequences(draw: st.DrawFn, max_steps: int = 5) -> list[Item]:
    """Planted records first, then commands; a register-batch step gets its manifest."""
    items: list[Item] = []
    plants = draw(st.lists(st.sampled_from(PLANTS), max_size=3, unique_by=lambda p: p.rel))
    items += plants
    cmds = draw(st.lists(COMMANDS, min_size=1, max_size=max_steps))
    if any(c.command == "register-batch" for c in cmds):
        items.append(WFile("m.json", draw(MANIFESTS)))
    items += cmds
    return items
