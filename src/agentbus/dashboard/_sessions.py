"""Browser sessions of the dashboard: proof, kept in an HttpOnly cookie, that the token was given.

A session id is 256 random bits; the dashboard keeps only its SHA-256 (a leaked memory
dump or log holds no usable cookie) and when it ends. Sessions live in this process:
a restarted dashboard (a new token, say) has none, and everyone logs in again.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Final

__all__ = ["LIFETIME", "Sessions"]

LIFETIME: Final = 12 * 3600.0  # s: a session lasts a working day, then the token is asked again
_LIMIT: Final = 1000  # sessions kept at most: the oldest goes first


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


class Sessions:
    """The sessions started by a good token, each until it ends (logout) or expires."""

    def __init__(
        self,
        *,
        lifetime: float = LIFETIME,
        limit: int = _LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime = lifetime
        self._limit = limit
        self._clock = clock
        self._ends: dict[bytes, float] = {}  # digest -> when it expires; oldest first

    def __len__(self) -> int:
        return len(self._ends)

    def start(self) -> str:
        """Start a session; return its id (the cookie's value)."""
        now = self._clock()
        for digest in [d for d, end in self._ends.items() if end <= now]:
            del self._ends[digest]
        while len(self._ends) >= self._limit:
            del self._ends[next(iter(self._ends))]
        session_id = secrets.token_urlsafe(32)
        self._ends[_digest(session_id)] = now + self.lifetime
        return session_id

    def valid(self, session_id: str | None) -> bool:
        """Whether ``session_id`` is a session started here, not ended nor expired."""
        if not session_id:
            return False
        end = self._ends.get(_digest(session_id))
        return end is not None and self._clock() < end

    def end(self, session_id: str | None) -> None:
        """End the session (logout); an unknown id is no error."""
        if session_id:
            self._ends.pop(_digest(session_id), None)
