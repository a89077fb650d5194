"""Run agent-coord's recorded conformance scenarios against our agentcoordctl and
compare the results with the goldens in Python.

The recorded material lives in tests/fixtures/conformance/ (copied from the
conformance kit, see its README.md): two bash drivers, normalize.py and two
golden directories. A scenario is run through its driver with ONLY=<name> into
its own OUT_DIR; the driver's own PASS/FAIL line is kept for reference only.
This module parses both strict files (OUT_DIR/<name>.txt and the golden), lists
every difference as a `Difference`, and lets the allow-list (allowed.py) cover
documented deliberate ones precisely.

Strict file grammar (written by normalize.py `render`):

    # scenario: NAME
    # DESCRIPTION
    ## step N: [ENV ...] ARGS        then "(wrote state file directly)" or
    exit=RC                           optionally followed by
    stdout.json:                      and the normalized JSON (indent 2)
    ## state TOKEN                    then "(no files)" or, per file,
    ### REL                           a JSON document or "UNPARSEABLE JSON: ..."
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "conformance"
COMPAT_DOC = REPO / "docs" / "compat.md"

# set name -> (driver script, golden directory), both inside FIXTURES
SETS: dict[str, tuple[str, str]] = {
    "scenarios": ("scenarios.sh", "golden"),
    "scenarios2": ("scenarios2.sh", "golden2"),
    # minimal sequences the differential tester found (tests/conformance/differential.py)
    "differential": ("differential.sh", "golden3"),
}

# A whole scenario (begin .. finish) must run well inside 30 s: expiries written
# with the default 4h TTL are masked to whole minutes from the scenario's start,
# so a step that runs 30 s late reads <NOW+241m> instead of <NOW+240m>.
SCENARIO_TIMEOUT = float(os.environ.get("AGENTCOORD_CONFORMANCE_TIMEOUT", "240"))


# ---------------------------------------------------------------- scenarios

@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    set: str
    script: Path
    golden: Path
    golden_messages: Path


_SCENARIO_LINE = re.compile(r"^scenario (\S+)\s*$", re.M)


def discover() -> list[Scenario]:
    """Every scenario the drivers declare (`scenario NAME` lines), in driver order."""
    found: list[Scenario] = []
    for set_name, (script, golden_dir) in SETS.items():
        path = FIXTURES / script
        for name in _SCENARIO_LINE.findall(path.read_text(encoding="utf-8")):
            gdir = FIXTURES / golden_dir
            found.append(Scenario(name, set_name, path, gdir / f"{name}.txt",
                                  gdir / f"{name}.messages.txt"))
    return found


SCENARIOS: dict[str, Scenario] = {s.name: s for s in discover()}


def ctl_path() -> Path:
    """Our agentcoordctl: the console script next to the running interpreter."""
    return Path(sys.executable).parent / "agentcoordctl"


@dataclasses.dataclass
class Run:
    scenario: Scenario
    out_dir: Path
    returncode: int | None  # the driver's; None when it timed out
    stdout: str
    stderr: str
    seconds: float

    @property
    def strict(self) -> Path:
        return self.out_dir / f"{self.scenario.name}.txt"

    @property
    def messages(self) -> Path:
        return self.out_dir / f"{self.scenario.name}.messages.txt"

    @property
    def verdict(self) -> str:
        """The driver's own PASS/FAIL line (for reference; we compare ourselves)."""
        for line in self.stdout.splitlines():
            if line.split(" ", 1)[0] in ("PASS", "FAIL", "NOGOLDEN"):
                return line
        return "(no verdict line)"

    def problem(self) -> str | None:
        """Why this run cannot be compared at all (driver crashed, timed out...)."""
        if self.returncode is None:
            return f"driver timed out after {SCENARIO_TIMEOUT:.0f}s"
        if self.returncode not in (0, 1) or not self.strict.is_file():
            return (f"driver exited {self.returncode} without a result file {self.strict}\n"
                    f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}")
        return None


def scenario_env(ctl: Path, out_dir: Path, name: str) -> dict[str, str]:
    """The caller's environment minus anything that could select a backend, a
    socket or a daemon state dir (the drivers unset most of these themselves; a
    developer's AGENT_COORD_SOCKET or AGENT_COORD_TIMEOUT must not leak in
    either), with the venv's bin dir first on PATH (so `python3` in the driver is
    the venv's, as is the daemon ctl autostarts)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENT_COORD_", "AGENTCOORD_", "XDG_"))
           and k not in ("CODEX_THREAD_ID", "MODE", "GOLDEN_DIR", "OUT_DIR", "ONLY", "LABEL")}
    env["PATH"] = os.pathsep.join([str(ctl.parent), env.get("PATH", os.defpath)])
    env.update(MODE="compare", OUT_DIR=str(out_dir), ONLY=name)
    return env


def run_scenario(scenario: Scenario, out_root: Path, ctl: Path | None = None) -> Run:
    """Run one scenario through its copied driver; the driver leaves
    OUT_DIR/<name>.txt and OUT_DIR/<name>.messages.txt."""
    ctl = ctl or ctl_path()
    out_dir = out_root / scenario.set / scenario.name
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(scenario.script), str(ctl)], cwd=REPO,
        env=scenario_env(ctl, out_dir, scenario.name), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group: a timeout ends all of it
    )
    try:
        out, err = proc.communicate(timeout=SCENARIO_TIMEOUT)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the driver we started
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        rc = None
    return Run(scenario, out_dir, rc, out, err, time.monotonic() - started)



class Runner:
    """Scenario runs of one session: a pool of `jobs` worker threads, one
    driver process each; every scenario runs at most once."""

    def __init__(self, out_root: Path, jobs: int) -> None:
        self.out_root = out_root
        self.jobs = jobs
        self.ctl = ctl_path()
        self.pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="conformance")
        self.futures: dict[str, Future[Run]] = {}
        self.lock = threading.Lock()
        self.runs: list[Run] = []

    def submit(self, scenario: Scenario) -> Future[Run]:
        with self.lock:
            if scenario.name not in self.futures:
                self.futures[scenario.name] = self.pool.submit(
                    run_scenario, scenario, self.out_root, self.ctl)
            return self.futures[scenario.name]

    def get(self, name: str) -> Run:
        run = self.submit(SCENARIOS[name]).result()
        if not any(r is run for r in self.runs):
            self.runs.append(run)
        return run

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- strict files

class _NoJson:
    def __repr__(self) -> str:
        return "(no JSON stdout)"


NO_JSON: Any = _NoJson()


@dataclasses.dataclass(frozen=True)
class Unparseable:
    """A state file normalize.py could not parse (kept as its masked text)."""
    text: str


@dataclasses.dataclass
class Step:
    i: int
    label: str
    kind: str  # "run" | "put"
    rc: str | None = None
    stdout: Any = NO_JSON


@dataclasses.dataclass
class Strict:
    header: list[str]
    steps: dict[int, Step]
    states: dict[str, dict[str, Any]]  # token -> rel path -> JSON value | Unparseable


_STEP = re.compile(r"^## step (\d+): (.*)$")
_STATE = re.compile(r"^## state (\S+)$")


def _body(lines: list[str]) -> Any:
    text = "\n".join(lines).strip("\n")
    if text.startswith("UNPARSEABLE JSON: "):
        return Unparseable(text)
    return json.loads(text)


def parse_strict(text: str) -> Strict:
    header: list[str] = []
    steps: dict[int, Step] = {}
    states: dict[str, dict[str, Any]] = {}
    step: Step | None = None
    state: dict[str, Any] | None = None
    rel: str | None = None
    buf: list[str] = []
    in_json = False

    def flush() -> None:
        nonlocal buf, in_json, rel
        if step is not None and in_json:
            step.stdout = _body(buf)
        if state is not None and rel is not None:
            state[rel] = _body(buf)
        buf, in_json, rel = [], False, None

    for line in text.splitlines():
        m = _STEP.match(line)
        if m:
            flush()
            state = None
            step = Step(int(m.group(1)), m.group(2), "run")
            steps[step.i] = step
            continue
        m = _STATE.match(line)
        if m:
            flush()
            step = None
            state = states.setdefault(m.group(1), {})
            continue
        if state is not None and line.startswith("### "):
            flush()
            rel = line[4:]
            continue
        if step is None and state is None:
            header.append(line)
        elif step is not None and not in_json:
            if line == "(wrote state file directly)":
                step.kind = "put"
            elif line.startswith("exit="):
                step.rc = line[5:]
            elif line == "stdout.json:":
                in_json = True
            else:
                raise ValueError(f"unexpected line in step {step.i}: {line!r}")
        elif state is not None and rel is None:
            if line != "(no files)":
                raise ValueError(f"unexpected line in a state section: {line!r}")
        else:
            buf.append(line)
    flush()
    return Strict(header, steps, states)


# ---------------------------------------------------------------- differences

Path_ = tuple[str, ...]  # a JSON path: object keys and list indices as strings

STDOUT_KINDS = frozenset({"value", "key-extra", "key-missing", "item-extra", "item-missing",
                          "stdout-json-extra", "stdout-json-missing"})
JSON_KINDS = frozenset({"value", "key-extra", "key-missing", "item-extra", "item-missing"})


@dataclasses.dataclass(frozen=True)
class Difference:
    """One way our strict output differs from agent-coord's.

    kind: exit | stdout-json-extra (we print JSON, the golden has none) |
    stdout-json-missing | value | key-extra | key-missing | item-extra |
    item-missing (JSON, at `path`, in a step's stdout or a state file) |
    file-extra | file-missing (a state file) | structure (never allowable).
    """

    scenario: str
    kind: str
    step: int | None = None
    file: str | None = None  # "<ROOT>/claims/acme/widgets/2.json"
    path: Path_ = ()
    golden: Any = None
    ours: Any = None
    rc: tuple[str | None, str | None] = (None, None)  # (golden, ours) exit codes of the step

    def describe(self) -> str:
        where = (f"step {self.step}" if self.step is not None
                 else f"state {self.file}" if self.file is not None else "scenario")
        p = f" at {fmt_path(self.path)}" if self.path or self.kind in JSON_KINDS else ""
        g, o = _short(self.golden), _short(self.ours)
        text = {
            "exit": f"exit code {g} (agent-coord) vs {o} (ours)",
            "stdout-json-extra": f"ours prints JSON where agent-coord prints none "
                                 f"(exit {self.rc[0]} vs {self.rc[1]})",
            "stdout-json-missing": "agent-coord prints JSON, ours prints none",
            "value": f"{g} (agent-coord) vs {o} (ours)",
            "key-extra": f"extra key in ours: {o}",
            "key-missing": f"key missing in ours (agent-coord: {g})",
            "item-extra": f"extra list item in ours: {o}",
            "item-missing": f"list item missing in ours (agent-coord: {g})",
            "file-extra": "file exists only in ours",
            "file-missing": "file missing in ours",
            "structure": f"{g} (agent-coord) vs {o} (ours)",
        }[self.kind]
        return f"{where}{p}: {text}"


def fmt_path(path: Path_) -> str:
    return ".".join(path) if path else "(document)"


def _short(v: Any, limit: int = 160) -> str:
    s = v.text if isinstance(v, Unparseable) else json.dumps(v, ensure_ascii=False, sort_keys=True)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # JSON: 1 != 1.0 != true


def json_diff(golden: Any, ours: Any, path: Path_ = ()) -> list[tuple[str, Path_, Any, Any]]:
    """(kind, path, golden, ours) for every difference; lists are compared by
    position (items past the shorter list are item-extra / item-missing)."""
    if isinstance(golden, dict) and isinstance(ours, dict):
        out: list[tuple[str, Path_, Any, Any]] = []
        for k, g in golden.items():
            if k not in ours:
                out.append(("key-missing", path + (k,), g, None))
            else:
                out += json_diff(g, ours[k], path + (k,))
        out += [("key-extra", path + (k,), None, o) for k, o in ours.items() if k not in golden]
        return out
    if isinstance(golden, list) and isinstance(ours, list):
        ours = _ties_in_golden_order(golden, ours)
        out = []
        for i, (g, o) in enumerate(zip(golden, ours)):
            out += json_diff(g, o, path + (str(i),))
        out += [("item-extra", path + (str(i),), None, ours[i])
                for i in range(len(golden), len(ours))]
        out += [("item-missing", path + (str(i),), golden[i], None)
                for i in range(len(ours), len(golden))]
        return out
    return [] if _same(golden, ours) else [("value", path, golden, ours)]


def _ties_in_golden_order(golden: list[Any], ours: list[Any]) -> list[Any]:
    """Records listed by time (`at`) whose normalized times are equal were written
    in the same second here or there: their order is the tie-break (path), which
    depends on timing, not behaviour. Within each run of equal `at` (same
    positions and value in both lists) ours is put in golden's order, matched by
    `path` / `event_id`."""
    def key(item: Any) -> Any:
        return item.get("path") or item.get("event_id") if isinstance(item, dict) else None

    if not all(isinstance(x, dict) and "at" in x for x in golden + ours):
        return ours
    ours = list(ours)
    start = 0
    while start < min(len(golden), len(ours)):
        end = start
        while end < len(golden) and golden[end]["at"] == golden[start]["at"]:
            end += 1
        run = ours[start:end]
        if len(run) == end - start and all(x["at"] == golden[start]["at"] for x in run):
            order = [key(g) for g in golden[start:end]]
            run.sort(key=lambda x: order.index(key(x)) if key(x) in order else len(order))
            ours[start:end] = run
        start = end
    return ours


def is_substructure(golden: Any, ours: Any) -> bool:
    """The definition of "additive": every key and value of agent-coord's JSON is
    in ours unchanged; ours may only add object keys and append list items."""
    return all(kind in ("key-extra", "item-extra") for kind, *_ in json_diff(golden, ours))


def compare(name: str, golden: Strict, ours: Strict) -> list[Difference]:
    diffs: list[Difference] = []
    if golden.header != ours.header:
        diffs.append(Difference(name, "structure", golden=golden.header, ours=ours.header))
    if [(s.i, s.label, s.kind) for s in golden.steps.values()] != \
            [(s.i, s.label, s.kind) for s in ours.steps.values()]:
        diffs.append(Difference(name, "structure",
                                golden=[s.label for s in golden.steps.values()],
                                ours=[s.label for s in ours.steps.values()]))
        return diffs  # steps cannot be paired up
    for i, g in golden.steps.items():
        o = ours.steps[i]
        if g.kind != "run":
            continue
        rc = (g.rc, o.rc)
        if g.rc != o.rc:
            diffs.append(Difference(name, "exit", step=i, golden=g.rc, ours=o.rc, rc=rc))
        if g.stdout is NO_JSON and o.stdout is NO_JSON:
            continue
        if g.stdout is NO_JSON:
            diffs.append(Difference(name, "stdout-json-extra", step=i, ours=o.stdout, rc=rc))
        elif o.stdout is NO_JSON:
            diffs.append(Difference(name, "stdout-json-missing", step=i, golden=g.stdout, rc=rc))
        else:
            diffs += [Difference(name, kind, step=i, path=p, golden=gv, ours=ov, rc=rc)
                      for kind, p, gv, ov in json_diff(g.stdout, o.stdout)]
    if list(golden.states) != list(ours.states):
        diffs.append(Difference(name, "structure", golden=list(golden.states),
                                ours=list(ours.states)))
    for token in golden.states:
        gfiles, ofiles = golden.states[token], ours.states.get(token, {})
        for rel in sorted(set(gfiles) | set(ofiles)):
            f = f"{token}/{rel}"
            if rel not in ofiles:
                diffs.append(Difference(name, "file-missing", file=f, golden=gfiles[rel]))
            elif rel not in gfiles:
                diffs.append(Difference(name, "file-extra", file=f, ours=ofiles[rel]))
            else:
                diffs += [Difference(name, kind, file=f, path=p, golden=gv, ours=ov)
                          for kind, p, gv, ov in json_diff(gfiles[rel], ofiles[rel])]
    return diffs


def unified(golden_text: str, ours_text: str, golden_name: str, limit: int = 300) -> str:
    lines = list(difflib.unified_diff(golden_text.splitlines(), ours_text.splitlines(),
                                      f"golden: {golden_name}", "ours", lineterm="", n=2))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


# ---------------------------------------------------------------- messages

@dataclasses.dataclass
class MessageStep:
    stdout: list[str] = dataclasses.field(default_factory=list)
    stderr: list[str] = dataclasses.field(default_factory=list)


def parse_messages(text: str) -> dict[int, MessageStep]:
    """Per step the masked stdout text (when not JSON) and stderr lines."""
    steps: dict[int, MessageStep] = {}
    cur: MessageStep | None = None
    section: str | None = None
    for line in text.splitlines():
        m = _STEP.match(line)
        if m:
            cur, section = MessageStep(), None
            steps[int(m.group(1))] = cur
            continue
        if line.startswith("## "):  # "## non-JSON files in TOKEN:" ends the steps
            cur = None
            continue
        if cur is None:
            continue
        if line in ("stdout:", "stderr:") and (section is None or section == "stdout"):
            section = line[:-1]
            continue
        if section is None:
            continue  # exit=..., (wrote state file directly)
        getattr(cur, section).append(line)
    return steps


@dataclasses.dataclass(frozen=True)
class MessageMismatch:
    scenario: str
    step: int
    golden: str  # agent-coord's stderr line
    ours: tuple[str, ...]  # our stderr lines of that step

    def describe(self, label: str = "") -> str:
        ours = "\n".join(f"      ours: {line}" for line in self.ours) or "      ours: (no stderr)"
        label = f" [{label}]" if label else ""
        return f"step {self.step}{label}: agent-coord's stderr line is not in ours:\n" \
               f"      agent-coord: {self.golden}\n{ours}"


def message_mismatches(name: str, golden: str, ours: str) -> list[MessageMismatch]:
    """Each non-blank stderr line of agent-coord must appear in one of our stderr
    lines of the same step (as its prefix or contained in it: ours may be richer)."""
    g, o = parse_messages(golden), parse_messages(ours)
    out = []
    for i, step in g.items():
        mine = tuple(o.get(i, MessageStep()).stderr)
        for line in step.stderr:
            if line.strip() and not any(line in m for m in mine):
                out.append(MessageMismatch(name, i, line, mine))
    return out


def text_differences(name: str, golden: str, ours: str) -> list[Difference]:
    """The differential tester's text check (kinds stdout-text, stderr): text
    stdout line by line, and agent-coord's first stderr line must appear in
    one of ours."""
    g, o = parse_messages(golden), parse_messages(ours)
    out = []
    for i, step in g.items():
        mine = o.get(i)
        if mine is None:
            continue
        if step.stdout != mine.stdout:
            out.append(Difference(name, "stdout-text", step=i, golden="\n".join(step.stdout),
                                  ours="\n".join(mine.stdout)))
        first = next((line for line in step.stderr if line.strip()), None)
        if first is not None and not any(first in line for line in mine.stderr):
            out.append(Difference(name, "stderr", step=i, golden=first, ours="\n".join(mine.stderr)))
    return out


# ---------------------------------------------------------------- allowances

def path_matches(path: Path_, pattern: str) -> bool:
    """Dotted JSON path pattern: `a.b.3`; `*` is one segment, `**` any number."""
    pat = tuple(pattern.split(".")) if pattern else ()

    def match(p: Path_, q: tuple[str, ...]) -> bool:
        if not q:
            return not p
        if q[0] == "**":
            return any(match(p[k:], q[1:]) for k in range(len(p) + 1))
        return bool(p) and (q[0] == "*" or q[0] == p[0]) and match(p[1:], q[1:])

    return match(path, pat)


def file_matches(file: str, pattern: str) -> bool:
    """`<ROOT>/claims/acme/widgets/2.json`; `*` within one segment, `**` across."""
    rx = "".join(".*" if tok == "**" else "[^/]*" if tok == "*" else re.escape(tok)
                 for tok in re.split(r"(\*\*|\*)", pattern) if tok)
    return re.fullmatch(rx, file) is not None


@dataclasses.dataclass(frozen=True)
class Allowance:
    """A deliberate difference, documented in docs/compat.md at `compat` (#anchor)."""

    scenario: str
    compat: str
    why: str

    def components(self) -> tuple[str, ...]:
        """The parts that must each still cover a difference (else: stale)."""
        raise NotImplementedError

    def covers(self, d: Any) -> str | None:
        """The component covering difference `d`, or None."""
        raise NotImplementedError

    @property
    def id(self) -> str:
        parts = ",".join(c.removeprefix("step ").replace(" ", "-") for c in self.components())
        return f"{self.scenario}:{type(self).__name__}:{parts}"


EVERY_SCENARIO = "*"


@dataclasses.dataclass(frozen=True)
class FieldAddedEverywhere(Allowance):
    """In every scenario (`scenario="*"`): an object key `field` that only ours has, in a
    state file or a step's JSON — a field our records carry and agent-coord's do not
    (its readers ignore unknown fields)."""

    field: str = ""

    def components(self) -> tuple[str, ...]:
        return (self.field,)

    def covers(self, d: Difference) -> str | None:
        if isinstance(d, Difference) and d.kind == "key-extra" and d.path and d.path[-1] == self.field:
            return self.field
        return None


def _steps(steps: Iterable[int] | None) -> tuple[str, ...]:
    return tuple(f"step {n}" for n in steps) if steps is not None else ("any step",)


@dataclasses.dataclass(frozen=True)
class StepMayDiffer(Allowance):
    """Step N's exit code and/or JSON stdout may differ (any way, or only at
    `stdout_paths`)."""

    steps: tuple[int, ...] = ()
    exit: bool = True
    stdout: bool = True
    stdout_paths: tuple[str, ...] | None = None

    def components(self) -> tuple[str, ...]:
        return _steps(self.steps)

    def covers(self, d: Difference) -> str | None:
        if d.scenario != self.scenario or d.step not in self.steps:
            return None
        if d.kind == "exit" and self.exit:
            return f"step {d.step}"
        if d.kind in STDOUT_KINDS and self.stdout and (
                self.stdout_paths is None or any(path_matches(d.path, p) for p in self.stdout_paths)):
            return f"step {d.step}"
        return None


@dataclasses.dataclass(frozen=True)
class StateMayDiffer(Allowance):
    """State files matching `files` may differ in content ("differ"; only at
    `fields` if given), be missing in ours ("absent") or exist only in ours
    ("extra")."""

    files: tuple[str, ...] = ()
    how: frozenset[str] = frozenset({"differ", "absent", "extra"})
    fields: tuple[str, ...] | None = None

    def components(self) -> tuple[str, ...]:
        return self.files

    def covers(self, d: Difference) -> str | None:
        if d.scenario != self.scenario or d.file is None:
            return None
        how = {"file-missing": "absent", "file-extra": "extra"}.get(d.kind, "differ")
        if how not in self.how:
            return None
        if how == "differ" and self.fields is not None and \
                not any(path_matches(d.path, p) for p in self.fields):
            return None
        return next((p for p in self.files if file_matches(d.file, p)), None)


@dataclasses.dataclass(frozen=True)
class AdditiveJson(Allowance):
    """Step N's JSON stdout may be a superset of agent-coord's (see
    `is_substructure`): extra object keys at `keys` (path patterns; None = any
    key anywhere) and list items appended to the vocabulary lists `lists`
    (path pattern -> the items that may be appended, or None for any). A
    changed or missing value is never additive."""

    steps: tuple[int, ...] = ()
    keys: tuple[str, ...] | None = None
    lists: Mapping[str, tuple[Any, ...] | None] = dataclasses.field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.scenario, self.steps, self.keys, tuple(self.lists)))

    def components(self) -> tuple[str, ...]:
        return _steps(self.steps)

    def covers(self, d: Difference) -> str | None:
        if d.scenario != self.scenario or d.step not in self.steps:
            return None
        if d.kind == "key-extra" and (
                self.keys is None or any(path_matches(d.path, k) for k in self.keys)):
            return f"step {d.step}"
        if d.kind == "item-extra":
            for pattern, items in self.lists.items():
                if path_matches(d.path[:-1], pattern) and (items is None or d.ours in items):
                    return f"step {d.step}"
        return None


@dataclasses.dataclass(frozen=True)
class JsonOnFailure(Allowance):
    """Step N fails with the same exit code as agent-coord but ours also prints
    its JSON report where agent-coord printed none."""

    steps: tuple[int, ...] = ()

    def components(self) -> tuple[str, ...]:
        return _steps(self.steps)

    def covers(self, d: Difference) -> str | None:
        if (d.scenario == self.scenario and d.step in self.steps and d.kind == "stdout-json-extra"
                and d.rc[0] == d.rc[1] and d.rc[0] not in (None, "0")):
            return f"step {d.step}"
        return None


@dataclasses.dataclass(frozen=True)
class MessageMayDiffer(Allowance):
    """agent-coord's stderr lines matching the regex `golden` (re.search) in
    `steps` (None: any step) need not appear in ours — provided one of our
    stderr lines of that step matches `instead` (if given)."""

    golden: str = ""
    steps: tuple[int, ...] | None = None
    instead: str | None = None

    def components(self) -> tuple[str, ...]:
        return _steps(self.steps)

    def covers(self, m: MessageMismatch) -> str | None:
        if m.scenario != self.scenario or (self.steps is not None and m.step not in self.steps):
            return None
        if not re.search(self.golden, m.golden):
            return None
        if self.instead is not None and not any(re.search(self.instead, o) for o in m.ours):
            return None
        return f"step {m.step}" if self.steps is not None else "any step"


@dataclasses.dataclass(frozen=True)
class TextMayDiffer(Allowance):
    """The differential set's text check: step N's text stdout may differ."""

    steps: tuple[int, ...] = ()

    def components(self) -> tuple[str, ...]:
        return _steps(self.steps)

    def covers(self, d: Difference) -> str | None:
        if d.scenario == self.scenario and d.kind == "stdout-text" and d.step in self.steps:
            return f"step {d.step}"
        return None


def triage(items: Sequence[Any], allowances: Sequence[Allowance]
           ) -> tuple[list[Any], dict[Allowance, set[str]]]:
    """Split differences into (not covered, {allowance: components used})."""
    used: dict[Allowance, set[str]] = {a: set() for a in allowances}
    left = []
    for item in items:
        covered = False
        for a in allowances:
            comp = a.covers(item)
            if comp is not None:
                used[a].add(comp)
                covered = True
        if not covered:
            left.append(item)
    return left, used


# ---------------------------------------------------------------- compat anchors

def _github_slug(heading: str) -> str:
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](link) -> text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(text: str) -> set[str]:
    """Anchors a link `compat.md#x` can land on: explicit `<a id="x">` /
    `<a name="x">` / any `id="x"` attribute, `{#x}` attribute blocks, and the
    slug GitHub gives every heading (with -1, -2 for repeats)."""
    anchors = set(re.findall(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""", text))
    anchors |= set(re.findall(r"\{#([\w\-.:]+)\}", text))
    seen: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _github_slug(re.sub(r"\{#[^}]*\}", "", m.group(1)))
            n = seen.get(slug, 0)
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return anchors
