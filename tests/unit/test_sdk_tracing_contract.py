"""The gateway's import-time patch of the a2a-sdk (gateway/_sdk_tracing.py): fails the day
the SDK changes what the patch relies on.

The patch relies on the SDK reading ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED`` once, at its
import, into ``a2a.utils.telemetry.otel_enabled``; and on its tracing being
``trace_function`` wrappers (``functools.wraps``: a ``__wrapped__``) set on the methods of
its request handlers, dispatchers and event queues, which ``unwrap`` puts back. Each case
imports ``agentbus.gateway`` in a fresh interpreter (the switch is read once per process)
and looks, on its own terms, for the SDK's wrappers on the methods the gateway's calls go
through: gone with tracing off, there with it on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("a2a")  # the gateway's extra (installed in dev)

SWITCH = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"

# What every call through the gateway runs: the handler, both dispatchers, the event
# queue, and a module-level function (``unwrap`` puts back both kinds).
PINNED = (
    "a2a.server.request_handlers:DefaultRequestHandler.on_message_send",
    "a2a.server.request_handlers:DefaultRequestHandler.on_message_send_stream",
    "a2a.server.request_handlers:DefaultRequestHandler.on_get_task",
    "a2a.server.routes.jsonrpc_dispatcher:JsonRpcDispatcher.handle_requests",
    "a2a.server.routes.rest_dispatcher:RestDispatcher.on_message_send",
    "a2a.server.events.event_queue_v2:EventQueueSource.enqueue_event",
    "a2a.server.events.event_queue_v2:EventQueueSource.dequeue_event",
    "a2a.server.tasks.task_manager:append_artifact_to_task",
)

_PROBE = """
import importlib, inspect, json, os, sys

import agentbus.gateway
from agentbus.gateway import _sdk_tracing
from a2a.utils import telemetry

def traced(value):
    # The SDK's wrapper, told by where its code lives (made inside a function of its
    # telemetry module), not by how _sdk_tracing finds it.
    return (
        inspect.isfunction(value)
        and value.__code__.co_filename == telemetry.__file__
        and "<locals>" in value.__code__.co_qualname
    )

def resolve(path):
    module, _, attribute = path.partition(":")
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = inspect.getattr_static(value, part)
    return value

left = 0
for name, module in list(sys.modules.items()):
    if name == "a2a" or name.startswith("a2a."):
        for value in list(vars(module).values()):
            members = vars(value).values() if inspect.isclass(value) else [value]
            left += sum(1 for member in members if traced(member))

print(json.dumps({
    "switch": os.environ.get(_sdk_tracing.SDK_SWITCH),
    "sdk_switch": _sdk_tracing.SDK_SWITCH,
    "otel_enabled": telemetry.otel_enabled,
    "sdk_tracing": _sdk_tracing.sdk_tracing(),
    "pinned": {path: traced(resolve(path)) for path in sys.argv[1:]},
    "left": left,
    "wrapped": all(
        callable(getattr(resolve(path), "__wrapped__", None)) for path in sys.argv[1:]
    ),
}))
"""


def _imported(**env: str) -> dict[str, Any]:
    """What a fresh interpreter sees once it has imported agentbus.gateway with ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("AGENTBUS_TRACING", SWITCH)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *PINNED],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def test_by_default_the_sdk_does_not_trace_and_its_wrappers_are_gone() -> None:
    """Without AGENTBUS_TRACING: the switch off, the SDK read it, no wrapper left in a2a."""
    seen = _imported()

    assert seen["sdk_switch"] == SWITCH
    assert seen["switch"] == "false"
    assert seen["otel_enabled"] is False, "the SDK no longer reads its switch at import"
    assert seen["sdk_tracing"] is False
    assert seen["pinned"] == dict.fromkeys(PINNED, False), "a wrapper the patch left in place"
    assert seen["left"] == 0, "the SDK wraps in a way unwrap() does not put back"


def test_with_tracing_on_the_sdk_wrappers_stay() -> None:
    """AGENTBUS_TRACING=1: the SDK traces, and its wrappers are untouched.

    Also the proof that the methods above are the SDK's wrappers in the first place: the day
    it stops wrapping them (or wraps them otherwise), the patch has nothing left to do.
    """
    pytest.importorskip("opentelemetry")  # without it the SDK never traces
    seen = _imported(AGENTBUS_TRACING="1")

    assert seen["switch"] == "true"
    assert seen["otel_enabled"] is True
    assert seen["sdk_tracing"] is True
    assert seen["pinned"] == dict.fromkeys(PINNED, True), "the SDK no longer wraps these"
    assert seen["wrapped"] is True, "the SDK's wrappers no longer say what they wrap"
    assert seen["left"] > len(PINNED)


def test_a_switch_already_set_is_kept() -> None:
    """The SDK's switch set to false by the user wins over AGENTBUS_TRACING=1."""
    seen = _imported(AGENTBUS_TRACING="1", **{SWITCH: "false"})

    assert seen["switch"] == "false"
    assert seen["sdk_tracing"] is False
    assert seen["left"] == 0
