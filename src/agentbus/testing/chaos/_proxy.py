"""A TCP proxy that injects network faults between clients and a broker.

Point a bus at the proxy instead of the broker, then break the network under it::

    async with ChaosProxy("127.0.0.1", 5672) as proxy:
        async with agentbus.connect(proxy.url()) as bus:
            proxy.stall()  # a partition: nothing crosses, nothing closes
            ...
            proxy.resume()

A stall holds everything that would cross, in both directions, closes included (a
peer that gives up during a stall is noticed by the other side only after ``resume``),
which is what a dropped link does to TCP. ``cut`` is the opposite: every connection is
reset at once. Faults apply to connections open now and to new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self
from urllib.parse import quote

__all__ = ["ChaosProxy", "ProxyState"]

_CHUNK: Final = 65536
_CONNECT_TIMEOUT: Final = 10.0
_EOF: Final = b""  # queued after the last chunk of a direction

_Chunk = tuple[float, bytes]  # when it was read (the loop's clock), and its bytes


class ProxyState(enum.Enum):
    """Where a ``ChaosProxy`` is in its life."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(eq=False)
class _Link:
    """One client connection and its connection to the target."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    budget: int | None  # bytes left before a cut_after cut; None: no limit
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class ChaosProxy:
    """An asyncio TCP proxy from ``host:port`` (a free port by default) to a target.

    Every fault method is synchronous and takes effect at once; call them from the
    event loop's thread.

    Attributes:
        connections: Client connections accepted so far.
        refused: Connections reset at once because of ``refuse``.
        cuts: Connections closed by ``cut`` or ``cut_after``.
        bytes_up: Bytes relayed from clients to the target.
        bytes_down: Bytes relayed from the target to clients.
        closed_by_client: Connections whose client closed its end (seen even during a stall).
        closed_by_target: Connections whose target closed its end (seen even during a stall).
    """

    def __init__(
        self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.host = host
        self.port = port
        self.connections = self.refused = self.cuts = 0
        self.bytes_up = self.bytes_down = 0
        self.closed_by_client = self.closed_by_target = 0
        self._state = ProxyState.NEW
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._delay = 0.0
        self._refusing = False
        self._cut_after: int | None = None
        self._cut_after_count = 0

    def __repr__(self) -> str:
        faults = [
            name
            for name, on in (
                ("stalled", self.is_stalled),
                ("refusing", self._refusing),
                (f"slow={self._delay:g}s", self._delay > 0),
                (f"cut_after={self._cut_after}", self._cut_after is not None),
            )
            if on
        ]
        return (
            f"<ChaosProxy {self.host}:{self.port} -> {self.target_host}:{self.target_port} "
            f"state={self._state.value} open={self.open_connections} "
            f"faults={','.join(faults) or 'none'}>"
        )

    @property
    def state(self) -> ProxyState:
        """Where the proxy is in its life."""
        return self._state

    @property
    def is_stalled(self) -> bool:
        """Tell whether bytes are being held (``stall``) rather than relayed."""
        return not self._flowing.is_set()

    @property
    def open_connections(self) -> int:
        """Client connections currently open through the proxy."""
        return len(self._links)

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "/") -> str:
        """Return an AMQP URL that reaches the target through the proxy."""
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        return f"amqp://{credentials}@{self.host}:{self.port}/{quote(vhost, safe='')}"

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> Self:
        """Start listening; ``port`` is the bound port afterwards."""
        if self._state is not ProxyState.NEW:
            raise RuntimeError(f"{self!r} cannot be started again")
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._state = ProxyState.OPEN
        return self

    async def aclose(self) -> None:
        """Stop listening, reset every connection and wait for the relays to end."""
        if self._state is ProxyState.CLOSED:
            return
        self._state = ProxyState.CLOSED
        if self._server is not None:
            self._server.close()
        self.cut()
        self._flowing.set()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    # Faults.

    def stall(self) -> None:
        """Hold every byte (and close) in both directions; connections stay open."""
        self._flowing.clear()

    def resume(self) -> None:
        """Relay again, starting with what a stall held."""
        self._flowing.set()

    def cut(self) -> None:
        """Reset every open connection at once (both sides see the connection drop)."""
        for link in list(self._links):
            self.cuts += 1
            self._drop(link)

    def cut_after(self, n_bytes: int, connections: int = 1) -> None:
        """Reset each of the next ``connections`` new connections after ``n_bytes`` relayed.

        Bytes in both directions count. ``n_bytes=0`` resets them before any byte crosses.
        """
        if n_bytes < 0 or connections < 1:
            raise ValueError("cut_after needs n_bytes >= 0 and connections >= 1")
        self._cut_after = n_bytes
        self._cut_after_count = connections

    def slow(self, delay: float) -> None:
        """Delay every chunk relayed, in both directions, by ``delay`` seconds.

        Each chunk goes ``delay`` after it was read, as over a link with that latency:
        chunks in flight overlap, they do not queue behind each other's delay.
        """
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self._delay = delay

    def fast(self) -> None:
        """Relay without delay again."""
        self._delay = 0.0

    def refuse(self) -> None:
        """Reset new connections as soon as they are accepted (a refused connect, to a client)."""
        self._refusing = True

    def accept(self) -> None:
        """Relay new connections again."""
        self._refusing = False

    def heal(self) -> None:
        """Clear every fault: resume, fast, accept, and no pending ``cut_after``."""
        self.resume()
        self.fast()
        self.accept()
        self._cut_after = None
        self._cut_after_count = 0

    # Relaying.

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The task streams made for this connection: it must end neither cancelled nor with
        # an exception (Python 3.11 would log either as an unhandled callback error).
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._relay(reader, writer)
        except (Exception, asyncio.CancelledError):
            writer.transport.abort()
        finally:
            self._handlers.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._refusing or self._state is not ProxyState.OPEN:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            async with asyncio.timeout(_CONNECT_TIMEOUT):
                up_reader, up_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
        except (OSError, TimeoutError):
            writer.transport.abort()  # the target is down: the client sees a dropped connect
            return
        budget = None
        if self._cut_after is not None:
            budget = self._cut_after
            self._cut_after_count -= 1
            if self._cut_after_count <= 0:
                self._cut_after = None
        link = _Link(writer, up_writer, budget)
        self._links.add(link)
        if budget == 0:
            self.cuts += 1
            self._drop(link)
            return
        for side in (writer, up_writer):
            side.transport.set_write_buffer_limits(high=0)  # drain() waits for a full flush
        up_queue: asyncio.Queue[_Chunk] = asyncio.Queue()
        down_queue: asyncio.Queue[_Chunk] = asyncio.Queue()
        link.tasks = [
            asyncio.create_task(self._read(reader, up_queue, from_client=True)),
            asyncio.create_task(self._read(up_reader, down_queue, from_client=False)),
            asyncio.create_task(self._write(link, up_queue, up_writer, upward=True)),
            asyncio.create_task(self._write(link, down_queue, writer, upward=False)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:  # both directions ended with a close: close gracefully
            self._links.discard(link)
            for side in (writer, up_writer):
                side.close()

    async def _read(
        self, reader: asyncio.StreamReader, queue: asyncio.Queue[_Chunk], *, from_client: bool
    ) -> None:
        # Reads go on during a stall, so that a close is seen (and counted) when it happens.
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while chunk := await reader.read(_CHUNK):
                queue.put_nowait((loop.time(), chunk))
        if from_client:
            self.closed_by_client += 1
        else:
            self.closed_by_target += 1
        queue.put_nowait((loop.time(), _EOF))

    async def _write(
        self,
        link: _Link,
        queue: asyncio.Queue[_Chunk],
        writer: asyncio.StreamWriter,
        *,
        upward: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            read_at, chunk = await queue.get()
            await self._flowing.wait()
            due = read_at + self._delay - loop.time()
            if self._delay > 0 and due > 0:
                await asyncio.sleep(due)
                await self._flowing.wait()
            if chunk == _EOF:  # the sending side closed: pass the close on (half-close)
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            cut = link.budget is not None and len(chunk) >= link.budget
            if link.budget is not None:
                chunk = chunk[: link.budget]
                link.budget -= len(chunk)
            writer.write(chunk)
            self._count(len(chunk), upward=upward)
            try:
                await writer.drain()
            except OSError:
                break
            if cut:
                self.cuts += 1
                break
        self._drop(link)

    def _count(self, n: int, *, upward: bool) -> None:
        if upward:
            self.bytes_up += n
        else:
            self.bytes_down += n

    def _drop(self, link: _Link) -> None:
        if link in self._links:
            self._links.discard(link)
            link.abort()
