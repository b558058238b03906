"""structlog configuration: JSON lines by default, readable on a terminal; no secrets."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Final, Literal, TextIO, cast

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = ["configure_logging"]

_URL_PASSWORD: Final = re.compile(r"(amqps?://[^:/@\s]*:)[^@\s]*@")
LogFormat = Literal["json", "console", "auto"]


def _scrub_secrets(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    # Belt and braces: a broker URL that reaches a log line loses its password.
    for key, value in event_dict.items():
        if isinstance(value, str) and "amqp" in value:
            event_dict[key] = _URL_PASSWORD.sub(r"\1***@", value)
    return event_dict


def _orjson_dumps(event_dict: Any, **kwargs: Any) -> str:
    return orjson.dumps(event_dict, default=str).decode()


class _CurrentStderr:
    # Loggers are cached on first use: each writes to sys.stderr as it is when it writes,
    # not as it was when logging was configured (a test runner swaps it, for one).
    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    level: str = "info", fmt: LogFormat = "auto", *, transport_level: int = logging.WARNING
) -> None:
    """Configure structlog for an agentbus process; logs go to standard error.

    Args:
        level: The lowest level logged: debug, info, warning, error.
        fmt: ``json`` lines, ``console`` (coloured, readable), or ``auto``: console
            on a terminal, JSON otherwise.
    """
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: Processor = (
        structlog.dev.ConsoleRenderer()
        if fmt == "console"
        else structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # aio-pika and aiormq log through the standard library: same format, same stream.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                _scrub_secrets,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in ("aio_pika", "aiormq"):
        logging.getLogger(name).setLevel(max(numeric, transport_level))
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            _scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
