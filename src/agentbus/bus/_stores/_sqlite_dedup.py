"""A de-duplication store in a SQLite file, shared by the instances of a service on one host.

Set ``AGENTBUS_DEDUP_PATH`` (``Settings.dedup_path``) to the same file for every instance:
a request one instance served, whose ack was then lost (a connection closed, a process
killed after the reply), is answered with the stored reply by whichever instance gets the
redelivery, instead of running again.

Only finished work is shared. A request another instance is still working on, or was
working on when it died, is not in the file, so it runs again: at-least-once, never lost.
Exactly-once effects need the effect and its mark in one transaction of the handler's own.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from agentbus._config import Settings, mask_url
from agentbus._exceptions import ConfigurationError, EnvelopeError
from agentbus._logging import get_logger
from agentbus._sqlite import connect_shared
from agentbus.bus._stores._dedup import DedupStore, DedupWindow, Reply, Seen, SharedDedupStore
from agentbus.bus._stores._redis_dedup import RedisDedupStore
from agentbus.envelopes import ErrorEnvelope, ResponseEnvelope, decode, encode

__all__ = ["SqliteDedupStore", "dedup_store"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS served (
    message_id TEXT PRIMARY KEY, reply BLOB NOT NULL, reply_to TEXT, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS served_by_time ON served (at);
"""
_PRUNE_EVERY: Final = 1000  # completions between two deletions of expired rows
_MAX_REPLY: Final = 16 * 1024 * 1024  # larger replies are not stored for replay

_log = get_logger("agentbus.bus")


class SqliteDedupStore:
    """Requests served, for ``window`` seconds, in the SQLite file at ``path`` (WAL mode).

    Requests running in this process are remembered in memory, as ``DedupWindow`` does.
    The file is opened on first use; ``close`` closes it.

    Args:
        path: The database file, the same for every instance sharing it.
        window: Seconds a served request is remembered.
        busy_timeout: Seconds a write waits for another process's write lock.
        clock: Wall-clock seconds (shared by processes); for tests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        window: float,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._window = window
        self._busy_timeout = busy_timeout
        self._clock = clock
        self._running: dict[str, float] = {}
        self._connection: sqlite3.Connection | None = None
        self._completions = 0

    def __repr__(self) -> str:
        state = "open" if self._connection is not None else "closed"
        return f"<SqliteDedupStore {str(self.path)!r} {state} running={len(self._running)}>"

    def __len__(self) -> int:
        return len(self._running)

    def check_in(self, message_id: str) -> Seen | None:
        """Return the earlier sighting of ``message_id``, or record this one and return None.

        A sighting is a request running in this process, or one served by any instance.
        """
        if self._window == 0:
            return None
        now = self._clock()
        started = self._running.get(message_id)
        if started is not None:
            return Seen(at=started)
        try:
            row = (
                self._db()
                .execute(
                    "SELECT reply, reply_to, at FROM served WHERE message_id = ? AND at >= ?",
                    (message_id, now - self._window),
                )
                .fetchone()
            )
        except sqlite3.Error as exc:  # at-least-once: serve it rather than fail the delivery
            _log.warning("dedup store unreadable", path=str(self.path), error=str(exc))
            row = None
        reply = _decoded(row[0]) if row is not None else None
        if reply is not None:
            return Seen(at=row[2], reply=reply, reply_to=row[1])
        self._running[message_id] = now
        return None

    def complete(
        self,
        message_id: str,
        reply: Reply | None,
        reply_to: str | None,
        body: bytes | None = None,
    ) -> None:
        """Store the reply of ``message_id``, for any instance to answer a duplicate with."""
        if self._window == 0:
            return
        self._running.pop(message_id, None)
        if reply is None:
            return
        now = self._clock()
        try:
            if body is None or len(body) > _MAX_REPLY:
                body = encode(reply, max_size=_MAX_REPLY)  # over the cap: says so, not stored
            db = self._db()
            db.execute(
                "INSERT OR REPLACE INTO served VALUES (?, ?, ?, ?)",
                (message_id, body, reply_to, now),
            )
            self._completions += 1
            if self._completions % _PRUNE_EVERY == 0:
                db.execute("DELETE FROM served WHERE at < ?", (now - self._window,))
        except (sqlite3.Error, EnvelopeError) as exc:  # a duplicate elsewhere runs again
            _log.warning("reply not stored for de-duplication", error=str(exc))

    def forget(self, message_id: str) -> None:
        """Drop this process's sighting: the work was abandoned here and may run again.

        A reply another instance stored for it stays: that work was done.
        """
        self._running.pop(message_id, None)

    def close(self) -> None:
        """Close the file (the stored replies stay, for the other instances)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            # Autocommit: a completion is in the file before the reply goes out.
            self._connection = connect_shared(self.path, self._busy_timeout, _SCHEMA)
        return self._connection


def _decoded(body: bytes) -> Reply | None:
    try:
        envelope = decode(body, max_size=_MAX_REPLY)
    except EnvelopeError as exc:  # written by another version: serve the request again
        _log.warning("stored reply unreadable", error=exc.message)
        return None
    return envelope if isinstance(envelope, ResponseEnvelope | ErrorEnvelope) else None


_SHARED_SCHEMES: Final = ("redis", "rediss", "unix")


def dedup_store(settings: Settings) -> DedupStore | SharedDedupStore:
    """Return the de-duplication store ``settings`` ask for: Redis (``dedup_url``), a SQLite
    file (``dedup_path``), else in memory.

    Raises:
        ConfigurationError: both are set, the URL is not Redis's, or the ``redis`` extra
            is missing.
    """
    if settings.dedup_url and settings.dedup_path:
        raise ConfigurationError("set one of dedup_url (every host) and dedup_path (one host)")
    if settings.dedup_url and settings.dedup_window > 0:
        scheme = settings.dedup_url.partition("://")[0]
        if scheme not in _SHARED_SCHEMES:
            raise ConfigurationError(
                f"dedup_url {mask_url(settings.dedup_url)!r}: the scheme must be one of "
                f"{', '.join(_SHARED_SCHEMES)}"
            )
        return RedisDedupStore(
            settings.dedup_url, settings.dedup_window, namespace=settings.exchange
        )
    if settings.dedup_path:
        return SqliteDedupStore(settings.dedup_path, settings.dedup_window)
    return DedupWindow(settings.dedup_window, settings.dedup_size)
