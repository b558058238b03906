"""Unit tests of ``topic_matches``: AMQP topic semantics, ``*`` one word, ``#`` zero or more."""

from __future__ import annotations

import pytest

from agentbus.bus import topic_matches
from support.topic_cases import TOPIC_CASES


def _case(pattern: str, key: str, expected: bool) -> object:
    return pytest.param(pattern, key, expected, id=f"{pattern!r}~{key!r}")


@pytest.mark.parametrize(("pattern", "key", "expected"), [_case(*case) for case in TOPIC_CASES])
def test_topic_matches_agrees_with_amqp(pattern: str, key: str, expected: bool) -> None:
    """A binding pattern matches a routing key exactly when RabbitMQ would route it."""
    assert topic_matches(pattern, key) is expected
