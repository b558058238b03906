"""Standard input for the stdio transport, read by the event loop.

The SDK reads standard input in a worker thread, which no cancel interrupts: a server told
to stop (SIGTERM) would wait for its client's next line. Read by the event loop instead, a
pipe's wait ends with the task that waits, so the server can close its buses and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Final, Self

__all__ = ["loop_stdin"]

_LONGEST_LINE: Final = 64 * 1024 * 1024
"""Bytes one message may take: more than any envelope (1 MiB by default) with its schemas."""


class _Lines:
    """Lines of text from a stream reader: what the SDK's stdio transport iterates."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


@contextlib.asynccontextmanager
async def loop_stdin() -> AsyncIterator[_Lines | None]:
    """Yield standard input's lines read by the event loop; None when it is not a pipe (a
    file, a terminal): the SDK's own reader then serves."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LONGEST_LINE)
    pipe = os.fdopen(os.dup(0), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except (OSError, ValueError):  # not a pipe, socket or character device
        pipe.close()
        yield None
        return
    try:
        yield _Lines(reader)
    finally:
        transport.close()
