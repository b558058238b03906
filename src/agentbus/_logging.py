"""structlog configuration: JSON lines by default, readable on a terminal; no secrets."""

from __future__ import annotations

import contextvars
import logging
import re
import sys
from typing import Any, Final, Literal, TextIO, cast

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = ["bind_delivery_ids", "configure_logging", "get_logger"]

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


class _LibraryLogger:
    # agentbus's own loggers. Once structlog is configured (by configure_logging, by the
    # application, by a test's capture_logs), they are structlog's. Until then they go
    # through the standard library's logging, as a library's should: an application that
    # configured nothing sees warnings and errors (logging's last resort), not debug lines.
    __slots__ = ("_name", "_stdlib", "_structlog")

    def __init__(self, name: str) -> None:
        self._name = name
        self._structlog: Any = structlog.get_logger(name)
        self._stdlib: Any = None

    def __getattr__(self, method: str) -> Any:
        if structlog.is_configured():
            return getattr(self._structlog, method)
        if self._stdlib is None:
            self._stdlib = structlog.wrap_logger(
                logging.getLogger(self._name),
                processors=[
                    structlog.contextvars.merge_contextvars,
                    structlog.stdlib.filter_by_level,
                    _scrub_secrets,
                    # A plain traceback: structlog's default where rich is installed prints
                    # every frame's locals (a broker URL's password among them) and holds
                    # the loop for milliseconds per exception (12 ms against 0.1 here).
                    structlog.dev.ConsoleRenderer(
                        colors=False, exception_formatter=structlog.dev.plain_traceback
                    ),
                ],
                wrapper_class=structlog.stdlib.BoundLogger,
            )
        return getattr(self._stdlib, method)


def get_logger(name: str) -> Any:
    """A logger for agentbus's module ``name``: structlog's once it is configured, else
    the standard library's (quiet below WARNING unless the application says otherwise)."""
    return _LibraryLogger(name)


# The seam onto structlog.contextvars: the context variables it binds these keys to,
# got through its public API in a throwaway context so that nothing is bound here.
# Setting them directly costs a tenth of bind_contextvars (it builds a dict and looks
# each variable up by name). tests/unit/test_logging.py checks that what is set here
# is what get_contextvars() returns and what a log line carries.
_DELIVERY_KEYS: Final = ("agent_id", "message_id", "correlation_id")
_DELIVERY_VARS: Final[tuple[contextvars.ContextVar[Any], ...]] = tuple(
    token.var
    for token in contextvars.Context()
    .run(structlog.contextvars.bind_contextvars, **dict.fromkeys(_DELIVERY_KEYS))
    .values()
)


def bind_delivery_ids(agent_id: str, message_id: str | None, correlation_id: str | None) -> None:
    """Bind a delivery's ids to every log line of the current context (its task)."""
    agent, message, correlation = _DELIVERY_VARS
    agent.set(agent_id)
    message.set(message_id)
    correlation.set(correlation_id)
