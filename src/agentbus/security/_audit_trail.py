"""The audit trail's writer: records buffered on the request path, written in order.

On the request path a record costs building a small dict and appending it to a buffer;
a writer task writes the buffer to the stream in order, each message the records
buffered meanwhile (one when traffic is light, up to ``_BATCH`` under load: the stream's
cost is per message). The stream itself is the transport's (``AuditStream``): the bus
gives a RabbitMQ stream, ``<exchange>.audit``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, Final, Protocol

from agentbus._logging import get_logger

__all__ = ["AuditSink", "AuditStream", "AuditTrail"]

_log = get_logger("agentbus.bus")
_DRAIN_TIMEOUT: Final = 5.0  # s: how long closing waits for the buffer to be written
_RETRY_WAIT: Final = 1.0  # s: between attempts while the connection is down
_BATCH: Final = 100


class AuditSink(Protocol):
    """Where the dispatcher appends audit records."""

    off: bool
    """No record is kept (no stream): the dispatcher does not build them."""

    def append(self, record: dict[str, Any]) -> None: ...


class AuditStream(Protocol):
    """The stream an ``AuditTrail`` writes to, on the transport."""

    @property
    def name(self) -> str:
        """The stream's name."""
        ...

    async def open(self) -> bool:
        """Find the stream (or declare it) and get ready to write; False: there is none."""
        ...

    async def write(self, batch: list[dict[str, Any]]) -> None:
        """Write ``batch`` as one message; raise if it was not written."""
        ...

    async def aclose(self) -> None:
        """Stop writing; never raises."""
        ...


class AuditTrail:
    """Writes audit records to ``stream``, in order, from a writer task of its own.

    The writer first opens the stream: off the bus's open, which it does not slow down.
    Records appended meanwhile wait in the buffer; if there is no stream, they are
    dropped and the trail turns itself off.
    """

    def __init__(self, stream: AuditStream) -> None:
        self.stream = stream
        self.written = 0
        self.failed = 0
        self.off = False
        self._buffer: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_forever(), name=f"audit:{self.stream.name}")

    def append(self, record: dict[str, Any]) -> None:
        """Queue ``record`` for the stream; it is written soon, in order."""
        if self.off:
            return
        self._buffer.append(record)
        self._wake.set()

    async def aclose(self) -> None:
        """Write what is buffered (a bounded wait), then stop the writer."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(_DRAIN_TIMEOUT):
                    await asyncio.shield(self._writer)
            self._writer.cancel()
        await self.stream.aclose()

    async def _write_forever(self) -> None:
        try:
            found = await self.stream.open()
        except Exception as exc:  # the connection went meanwhile: no trail for this bus
            _log.warning("audit stream not opened", error=repr(exc))
            found = False
        if not found:
            self.off = True
            self._buffer.clear()
            return
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._buffer:
                batch = [self._buffer[n] for n in range(min(len(self._buffer), _BATCH))]
                try:
                    await self.stream.write(batch)
                except Exception as exc:  # the connection is down: keep them, retry soon
                    self.failed += 1
                    _log.warning("audit records not written yet", error=repr(exc))
                    if self._closing:
                        return
                    await asyncio.sleep(_RETRY_WAIT)
                    continue
                for _ in batch:
                    self._buffer.popleft()
                self.written += len(batch)
            if self._closing:
                return
