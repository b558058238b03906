"""The event loop every ``agentbus`` process runs on: uvloop where ``agentbus[fast]`` installed it.

``AGENTBUS_LOOP`` chooses: ``auto`` (the default: uvloop when importable, else asyncio's
own loop), ``uvloop`` (uvloop or a configuration error) or ``asyncio``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from agentbus._exceptions import ConfigurationError

__all__ = ["LOOP_ENV", "loop_factory", "loop_name", "run"]

LOOP_ENV: Final = "AGENTBUS_LOOP"
_CHOICES: Final = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``AGENTBUS_LOOP`` asks for; None for asyncio's default."""
    choice = os.environ.get(LOOP_ENV, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ConfigurationError(f"{LOOP_ENV}={choice!r}: expected one of {', '.join(_CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            message = (
                f"{LOOP_ENV}=uvloop, but uvloop is not installed: pip install 'agentbus[fast]'"
            )
            raise ConfigurationError(message) from None
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on the chosen loop, as ``asyncio.run`` does."""
    try:
        factory = loop_factory()
    except ConfigurationError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the running loop's kind, for logs."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"
