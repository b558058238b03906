"""Fault points: places where a test can have this process die, at the hit it chooses.

``AGENTBUS_FAULT_POINTS=leader.settling:3`` kills the process (SIGKILL, as ``kill -9``)
the third time it passes the point ``leader.settling``; several are separated by commas.
Unset (as in production), a fault point costs one dictionary look-up.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Final

__all__ = ["fault_point"]

_ENV: Final = "AGENTBUS_FAULT_POINTS"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, hit = item.partition(":")
        points[name] = int(hit) if hit else 1
    return points


_POINTS: Final = _parse(os.environ.get(_ENV, ""))
_hits: Counter[str] = Counter()


def fault_point(name: str) -> None:
    """Die here (SIGKILL) if ``AGENTBUS_FAULT_POINTS`` names this point and this hit."""
    at = _POINTS.get(name)
    if at is None:
        return
    _hits[name] += 1
    if _hits[name] == at:
        os.kill(os.getpid(), signal.SIGKILL)
