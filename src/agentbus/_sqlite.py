"""SQLite files shared by processes on one host: autocommit, WAL, a busy timeout."""

from __future__ import annotations

import os
import sqlite3

__all__ = ["connect_shared"]


def connect_shared(
    path: str | os.PathLike[str], busy_timeout: float, schema: str
) -> sqlite3.Connection:
    """Open ``path`` for several processes at once and create ``schema`` if missing.

    Autocommit: each statement is in the file when it returns.
    """
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.executescript(schema)
    except BaseException:
        connection.close()
        raise
    return connection
