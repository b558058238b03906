"""The public API is curated: ``__all__`` is pinned and every name in it exists."""

from __future__ import annotations

import importlib

import pytest

import agentbus

EXPECTED_TOP_LEVEL = [
    "AccessRefused",
    "Agent",
    "AgentBusError",
    "AgentCard",
    "Aggregate",
    "BrokerUnavailable",
    "Bus",
    "BusClosed",
    "Cancelled",
    "ConfigurationError",
    "ConnectionLost",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "ErrorEnvelope",
    "EventEnvelope",
    "InvalidParameters",
    "Leader",
    "PayloadTooLarge",
    "Plan",
    "PlanClient",
    "PublishFailed",
    "RemoteError",
    "RequestEnvelope",
    "RequestTimeout",
    "ResponseEnvelope",
    "Settings",
    "Transport",
    "TransportError",
    "UnknownAction",
    "Unroutable",
    "UnsupportedVersion",
    "__version__",
    "connect",
    "current_request",
    "decode",
    "encode",
    "skill",
]


def test_top_level_all_is_pinned() -> None:
    """agentbus.__all__ is exactly the documented public API."""
    assert agentbus.__all__ == EXPECTED_TOP_LEVEL


def _isort_key(name: str) -> tuple[int, str]:
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    if name.isupper():
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


@pytest.mark.parametrize(
    "module",
    ["agentbus", "agentbus.envelopes", "agentbus.bus", "agentbus.agents", "agentbus.registry"],
)
def test_all_is_sorted_and_resolves(module: str) -> None:
    """Every package's __all__ is sorted, and each name in it is importable."""
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name} is listed but missing"


def test_every_error_is_an_agentbus_error() -> None:
    """Each exception class exported at the top level belongs to one tree."""
    errors = [
        getattr(agentbus, name)
        for name in agentbus.__all__
        if isinstance(getattr(agentbus, name), type)
        and issubclass(getattr(agentbus, name), BaseException)
    ]
    assert len(errors) >= 15
    assert all(issubclass(error, agentbus.AgentBusError) for error in errors)
