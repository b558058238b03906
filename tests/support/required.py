"""A tool a test needs and does not find: skip the test, or fail it under CI.

``CI`` or ``AGENTBUS_REQUIRE_BROKER`` set (and not ``0``/``false``) makes every tier's
tools required: a run that should exercise a tier fails rather than skipping it quietly.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def is_required() -> bool:
    """Tell whether a missing broker or tool fails the test (CI) instead of skipping it."""
    flag = os.environ.get("AGENTBUS_REQUIRE_BROKER") or os.environ.get("CI")
    return flag not in (None, "", "0", "false")


def missing(message: str) -> NoReturn:
    """Skip the test for want of a tool, or fail it under CI (reported where it was called)."""
    __tracebackhide__ = True
    if is_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
