"""What the CLI's commands share: settings from the context, JSON in and out, async bodies."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import click
import orjson

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._loop import run as run_loop
from agentbus.bus import Bus
from agentbus.cli._output import write_out

__all__ = [
    "client_bus",
    "client_id",
    "client_id_option",
    "client_settings",
    "error_text",
    "load_json",
    "print_json",
    "read_bytes",
    "run_async",
    "settings_of",
]

P = ParamSpec("P")
T = TypeVar("T")
_CLIENT_ID: Final = "agentbus.client_id"  # where --id is kept, in the context's meta
_EXPIRES_ENV = "AGENTBUS_INSTANCE_QUEUE_EXPIRES"
_CLIENT_QUEUE_EXPIRES = 5.0


def error_text(exc: AgentBusError) -> str:
    """What the CLI says of an agentbus error: its class, its wire code, its message."""
    return f"{type(exc).__name__} [{exc.code}]: {exc.message}"


def settings_of(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj
    return settings


def client_settings(ctx: click.Context) -> Settings:
    # A one-shot command's instance queue needs to outlive a reconnect, not the process
    # by a minute: unless it is set explicitly, it goes a few seconds after we close.
    settings = settings_of(ctx)
    if _EXPIRES_ENV in os.environ:
        return settings
    expires = min(settings.instance_queue_expires, _CLIENT_QUEUE_EXPIRES)
    return settings.model_copy(update={"instance_queue_expires": expires})


def client_id_option(func: Callable[P, T]) -> Callable[P, T]:
    """Give a command that opens a bus the ``--id`` option (its bus's id)."""

    def remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.meta[_CLIENT_ID] = value

    return click.option(
        "--id",
        "client_id",
        metavar="ID",
        expose_value=False,
        callback=remember,
        help="This command's id on the bus [one its broker user owns, with client in it].",
    )(func)


def client_id(ctx: click.Context) -> str | None:
    """The ``--id`` a command was given, if any."""
    value: str | None = ctx.meta.get(_CLIENT_ID)
    return value


def client_bus(ctx: click.Context) -> Bus:
    """A bus for a one-shot command: ``--id`` if given, and a queue that goes soon after."""
    return Bus(client_settings(ctx), agent_id=client_id(ctx))


def run_async(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_loop(func(*args, **kwargs))

    return wrapper


def load_json(value: str | None, what: str) -> Any:
    """Parse JSON given inline, as ``@file``, or ``-`` for standard input."""
    if value is None:
        return None
    try:
        if value == "-":
            text = sys.stdin.read()
        elif value.startswith("@"):
            text = Path(value[1:]).read_text(encoding="utf-8")
        else:
            text = value
        return orjson.loads(text)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value[1:]!r}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from exc


def print_json(data: Any) -> None:
    write_out(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path!r}: {exc.strerror}") from exc
