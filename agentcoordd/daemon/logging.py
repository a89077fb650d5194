"""structlog set-up: JSON lines on stderr when not a TTY (journald, log file),
console rendering on a terminal. Secrets never reach a log line: any key that
looks like a credential is redacted before rendering."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

# structlog imports rich when it is installed (typer brings it into the venv): ~100 ms of
# every daemon start, for features we never use (rich reprs of locals: show_locals is
# off; rich tracebacks on a console: the plain one serves). Hidden while structlog loads.
_HIDE_RICH = "rich" not in sys.modules
if _HIDE_RICH:
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
try:
    import structlog
    import structlog.tracebacks
finally:
    if _HIDE_RICH:
        del sys.modules["rich"]

_SECRET_KEY = re.compile(r"token|secret|password|passwd|authorization|credential", re.I)
REDACTED = "[redacted]"


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_KEY.search(str(k)) else _redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    return value


def redact_secrets(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    return {k: REDACTED if _SECRET_KEY.search(k) else _redact(v) for k, v in event.items()}


def configure(level: str = "info", *, stream: Any = None) -> None:
    out = stream or sys.stderr
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level: {level}")
    tty = hasattr(out, "isatty") and out.isatty()
    # JSON lines carry an exception as data (type, message, stack frames, never
    # local variables: they may hold a token); the console renderer prints the
    # traceback itself.
    rendering: list[Any] = (
        [structlog.dev.ConsoleRenderer(colors=False)] if tty
        else [structlog.processors.ExceptionRenderer(
                  structlog.tracebacks.ExceptionDictTransformer(show_locals=False)),
              structlog.processors.JSONRenderer()]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_secrets,
            *rendering,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(**bound: Any) -> Any:
    return structlog.get_logger("agentcoordd").bind(**bound)
