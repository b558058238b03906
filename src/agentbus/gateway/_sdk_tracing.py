"""The a2a-sdk's OpenTelemetry wrappers: only with agentbus's own tracing (``AGENTBUS_TRACING``).

The SDK wraps the methods of its request handlers, event queues and dispatchers in spans
unless ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED`` is ``false``, a variable it reads once, when
it is first imported. Off, each wrapper still runs, its spans no-ops (the gateway's bench:
the spans cost the SDK's server about a third more CPU per call, the no-op wrappers up to a
sixth). Imported before the SDK, this module defaults that variable to agentbus's switch (a
value already set is kept); once the SDK is imported, ``unwrap`` puts back the methods the
wrappers stand in for, when it is off.
"""

from __future__ import annotations

import inspect
import os
import sys
from types import CodeType, FunctionType
from typing import Any

from pydantic import TypeAdapter, ValidationError

__all__ = ["SDK_SWITCH", "sdk_tracing", "unwrap"]

SDK_SWITCH = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"


def _tracing() -> bool:
    value = os.environ.get("AGENTBUS_TRACING", "").strip()
    try:
        return bool(value) and TypeAdapter(bool).validate_python(value)
    except ValidationError:
        return False


os.environ.setdefault(SDK_SWITCH, "true" if _tracing() else "false")


def sdk_tracing() -> bool:
    """Whether the SDK traces (its switch, as it read it)."""
    from a2a.utils import telemetry

    return bool(telemetry.otel_installed and telemetry.otel_enabled)


def unwrap() -> int:
    """Put back the SDK's methods and functions for its tracing wrappers, if it does not
    trace; return how many were put back."""
    if sdk_tracing():
        return 0
    codes = _wrapper_codes()
    count = 0
    for name, module in list(sys.modules.items()):
        if name != "a2a" and not name.startswith("a2a."):
            continue
        for key, value in list(vars(module).items()):
            if _is_wrapper(value, codes):
                setattr(module, key, value.__wrapped__)
                count += 1
            elif inspect.isclass(value) and value.__module__ == name:
                for attribute, member in list(vars(value).items()):
                    if _is_wrapper(member, codes):
                        setattr(value, attribute, member.__wrapped__)
                        count += 1
    return count


def _wrapper_codes() -> frozenset[CodeType]:
    from a2a.utils.telemetry import trace_function

    async def coroutine() -> None:
        return None

    def function() -> None:
        return None

    return frozenset(trace_function(f).__code__ for f in (coroutine, function))


def _is_wrapper(value: Any, codes: frozenset[CodeType]) -> bool:
    return (
        isinstance(value, FunctionType)
        and value.__code__ in codes
        and callable(getattr(value, "__wrapped__", None))
    )
