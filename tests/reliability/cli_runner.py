"""Runs agentcoordctl invocations in-process, many per process (the CLI fuzzer's
worker): argv lists arrive as msgpack frames on fd IN, results go back on fd
OUT. stdin is /dev/null, stdout/stderr are captured per call. An exception that
escapes `cli.main` — the thing the fuzzer hunts — is reported with its
traceback; a call that runs past its limit is reported as hung.

    python cli_runner.py IN_FD OUT_FD
"""

from __future__ import annotations

import io
import os
import signal
import sys
import traceback

import msgspec

from agentcoordctl import cli, options
from agentcoordd import protocol as p

LIMIT_SECONDS = 60


class Hung(BaseException):
    """Raised by the alarm: not an Exception, so ctl's own boundary cannot swallow it."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Hung()


class Captured(io.TextIOWrapper):
    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="surrogateescape",
                         write_through=True)

    def value(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]


def run_one(args: list[str]) -> dict[str, object]:
    options.Globals.timeout = None
    out, err = Captured(), Captured()
    sys.stdout, sys.stderr = out, err
    escaped = None
    code: object = None
    signal.alarm(LIMIT_SECONDS)
    try:
        code = cli.main(args)
    except Hung:
        escaped = "hung: no answer within the limit"
    except BaseException:  # noqa: BLE001 - exactly what must never happen
        escaped = traceback.format_exc()
    finally:
        signal.alarm(0)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"code": code, "stdout": out.value()[-4000:], "stderr": err.value()[-4000:],
            "escaped": escaped}


def main() -> None:
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    signal.signal(signal.SIGALRM, _alarm)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
    reader = os.fdopen(in_fd, "rb", buffering=0)
    writer = os.fdopen(out_fd, "wb", buffering=0)
    decoder = msgspec.msgpack.Decoder(list[bytes])
    while True:
        try:
            header = _read(reader, p.HEADER)
        except EOFError:
            return
        argv = [os.fsdecode(arg) for arg in decoder.decode(_read(reader, int.from_bytes(header, "big")))]
        writer.write(p.frame(msgspec.msgpack.encode(run_one(argv))))


def _read(reader: io.RawIOBase, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = reader.read(size - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


if __name__ == "__main__":
    main()
