"""agentcoordctl: the thin client agents call (docs/architecture.md)."""

import sys as _sys

if "msgspec" not in _sys.modules and "typing_extensions" not in _sys.modules:
    # msgspec imports typing_extensions (installed for anyio and typer) only as an
    # optional refinement of typing; the client needs neither, and loading it (with
    # inspect, ast, dis, tokenize) costs ~10 ms of every call's start-up. Hidden only
    # while msgspec loads: anything importing it later (typer, for help) gets it.
    _sys.modules["typing_extensions"] = None  # type: ignore[assignment]
    try:
        import msgspec  # noqa: F401
    finally:
        del _sys.modules["typing_extensions"]
