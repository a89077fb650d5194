"""The CLI fuzzer's strategies and worker: every command of the real typer app,
its real options, hostile values (non-finite and huge numbers, control and
bidi characters, 10 MB strings, bytes that are not UTF-8, stray arguments).
Used by test_cli_fuzzer.py (CI size) and bench/reliability.py (full size)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from agentcoordd import protocol as p

RUNNER = Path(__file__).with_name("cli_runner.py")
ALLOWED_EXITS = {0, 1, 2, 3}
# Commands that leave the process (fork/exec a command, start another daemon) or
# stop the daemon under test; they have their own end-to-end tests.
SKIPPED = {("run",), ("demo",)}
# Options whose value is a place to write, or the backend itself: fixed here, so a
# generated value cannot legitimately create files elsewhere.
FIXED = {"--state-root", "--api-url", "--etcd-endpoints", "--backend", "--install-dir",
         "--profile", "--env-file", "--persist-to", "--password-file"}
# Options that make a command run until Ctrl-C.
NEVER = {"--watch", "--open"}

TEN_MB = "x" * (10 * 1024 * 1024)
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80),
    st.sampled_from(["", "-", "--", "../../etc/passwd", "/", "a/b/../../c", "x" * 4096, TEN_MB,
                     "line\nbreak", "tab\there", "\x1b[2J\x1b[H", "\u202eevil", "\u2028", "\x7f",
                     "é" * 3000, "CON", "a:b:c", "#1", "0", "-1", "nan", "inf", "1e309"]),
    st.binary(min_size=1, max_size=12).map(lambda b: os.fsdecode(b.replace(b"\x00", b"."))),
).map(lambda s: s.replace("\x00", "."))  # argv cannot carry NUL
hostile_numbers = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e309", "-1e309", "-1", "0", "0.0", "-0",
                     "99999999999999999999", "-99999999999999999999", "9" * 400, "0x10", "1_000",
                     "", " 5", "5 ", "+3", "1e-400", "2147483648", "4294967296",
                     "9007199254740993", "18446744073709551616"]),
    st.integers().map(str), st.floats().map(repr),
)


@dataclass(frozen=True)
class Option:
    name: str
    flag: bool
    numeric: bool
    required: bool = False


# Plausible values, so hostile ones also reach the daemon's checks, not only the parser's.
PLAUSIBLE = {"--agent-id": "agent-a", "--repo": "acme/widgets", "--target": "12",
             "--batch-id": "b1", "--lane": "ui", "--type": "note", "--family": "claim",
             "--file": "/dev/null", "--machine": "m1"}


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    options: tuple[Option, ...]
    arguments: int
    takes_state_root: bool


def commands() -> list[Command]:
    """Every leaf command of the real app with its options, from its declaration."""
    from agentcoordctl import cli

    found: list[Command] = []
    for declared in cli.declarations():
        if declared.path in SKIPPED:
            continue
        opts = [Option(opt.name, opt.kind == "flag", opt.kind in ("int", "custom"), opt.required)
                for opt in declared.options() if opt.name not in FIXED | NEVER]
        names = {opt.name for opt in declared.options()}
        found.append(Command(declared.path, tuple(opts), len(declared.arguments()),
                             "--state-root" in names))
    return found


@st.composite
def invocations(draw: st.DrawFn, catalog: list[Command], root: str) -> list[str]:
    command = draw(st.sampled_from(catalog))
    args = list(command.path)
    if command.path == ("daemon",):
        args.append(draw(st.sampled_from(["status", "restart", "", "stop-not", "x\ny"])))
    elif command.arguments:
        args.extend(draw(hostile_text) for _ in range(command.arguments))
    required = [o for o in command.options if o.required or o.name in PLAUSIBLE]
    chosen = draw(st.lists(st.sampled_from(command.options), max_size=8, unique=True)
                  if command.options else st.just([]))
    for option in [*required, *(o for o in chosen if o not in required)]:
        if option.flag:
            args.append(option.name)
            continue
        if option in required and option not in chosen:
            if option.name not in PLAUSIBLE:
                if not option.required:
                    continue
                value = draw(hostile_text)
            else:
                value = PLAUSIBLE[option.name]
            args += [option.name, value]
            continue
        value = draw(hostile_numbers if option.numeric else hostile_text)
        if draw(st.booleans()):
            args.append(f"{option.name}={value}")
        else:
            args += [option.name, value]
    if draw(st.integers(0, 9)) == 0:  # stray words and unknown options
        args.insert(draw(st.integers(0, len(args))), draw(hostile_text | st.just("--no-such")))
    if command.takes_state_root:
        args += ["--state-root", root]
    if command.path == ("wait",) or (command.path == ("events",) and "--follow" in args):
        args += ["--timeout", "1"]  # a wait (a follow) ends: the last --timeout wins
    if draw(st.integers(0, 7)) == 0:
        args = ["--timeout", draw(hostile_numbers), *args]
    return args


class Worker:
    """One cli_runner process; `call(args)` runs one invocation in it."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self.proc = subprocess.Popen(
            [os.environ.get("PYTHON", _python()), str(RUNNER), str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w), env=env, cwd=str(cwd),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_child_r)
        os.close(from_child_w)
        self._decoder = msgspec.msgpack.Decoder(dict[str, Any])

    def call(self, args: list[str]) -> dict[str, Any]:
        body = msgspec.msgpack.encode([os.fsencode(a) for a in args])
        _write_all(self._to_child, p.frame(body))
        header = _read_exactly(self._from_child, p.HEADER)
        return self._decoder.decode(_read_exactly(self._from_child, int.from_bytes(header, "big")))

    def close(self) -> str:
        os.close(self._to_child)
        os.close(self._from_child)
        try:
            _out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
        return err.decode("utf-8", "replace")


def _python() -> str:
    import sys

    return sys.executable


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = os.read(fd, size - len(buf))
        if not chunk:
            raise ConnectionError("the CLI runner died")
        buf += chunk
    return bytes(buf)


def verdict(args: list[str], result: dict[str, Any]) -> str | None:
    """Why this result breaks the contract, or None."""
    if result["escaped"]:
        return f"escaped: {result['escaped'][-1500:]}"
    code = result["code"]
    allowed = ALLOWED_EXITS | ({p.EXIT_STACK_USAGE} if "--stack-json" in args else set())
    if code not in allowed:
        return f"exit code {code!r}"
    for stream in ("stdout", "stderr"):
        if "Traceback (most recent call last)" in result[stream]:
            return f"traceback on {stream}: {result[stream][-1500:]}"
    if "internal error" in result["stderr"]:
        return f"internal error: {result['stderr'][-600:]}"
    return None


def files_outside(base: Path, allowed: list[Path]) -> list[str]:
    """Files created under `base` that are not below one of `allowed`."""
    out = []
    for current, _dirs, files in os.walk(base):
        for name in files:
            path = Path(current) / name
            if not any(path.is_relative_to(a) for a in allowed):
                out.append(str(path.relative_to(base)))
    return sorted(out)
