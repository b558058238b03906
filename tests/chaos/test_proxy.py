"""The chaos proxy on its own, in front of a local echo server: no broker needed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from agentbus.testing.chaos import ChaosProxy, ProxyState

pytestmark = pytest.mark.chaos


async def _eventually(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not predicate():  # noqa: ASYNC110 - a condition on counters, not an event
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"waited {seconds} s for {what}", pytrace=False)


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A TCP echo server on a free port."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.fixture
async def proxy(echo_port: int) -> AsyncIterator[ChaosProxy]:
    """A chaos proxy in front of the echo server."""
    async with ChaosProxy("127.0.0.1", echo_port) as chaos:
        yield chaos


async def _open(proxy: ChaosProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


async def _roundtrip(proxy: ChaosProxy, payload: bytes, seconds: float = 2.0) -> bytes:
    reader, writer = await _open(proxy)
    try:
        writer.write(payload)
        async with asyncio.timeout(seconds):
            return await reader.readexactly(len(payload))
    finally:
        writer.close()


async def test_relays_both_ways_and_counts(proxy: ChaosProxy) -> None:
    """Bytes go through in both directions, and the counters say how many."""
    assert await _roundtrip(proxy, b"hello") == b"hello"

    assert (proxy.connections, proxy.bytes_up, proxy.bytes_down) == (1, 5, 5)
    assert proxy.state is ProxyState.OPEN
    assert proxy.url("u", "p@ss", "v/h") == f"amqp://u:p%40ss@127.0.0.1:{proxy.port}/v%2Fh"


async def test_stall_holds_bytes_until_resume(proxy: ChaosProxy) -> None:
    """During a stall nothing crosses and nothing closes; resume delivers what was held."""
    reader, writer = await _open(proxy)
    proxy.stall()
    writer.write(b"held")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await reader.readexactly(4)
    assert proxy.open_connections == 1
    assert proxy.is_stalled
    assert "stalled" in repr(proxy)

    proxy.resume()

    async with asyncio.timeout(2):
        assert await reader.readexactly(4) == b"held"
    writer.close()


async def test_cut_resets_open_connections(proxy: ChaosProxy) -> None:
    """cut() drops every open connection at once; new ones work."""
    reader, writer = await _open(proxy)
    await _eventually(lambda: proxy.open_connections == 1, 2, "the connection")

    proxy.cut()

    async with asyncio.timeout(2):
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await reader.readexactly(1)
    writer.close()
    assert (proxy.cuts, proxy.open_connections) == (1, 0)
    assert await _roundtrip(proxy, b"again") == b"again"


async def test_cut_after_closes_the_next_connection_after_n_bytes(proxy: ChaosProxy) -> None:
    """cut_after(n) lets about n bytes through on the next connection, then resets it."""
    proxy.cut_after(6)
    reader, writer = await _open(proxy)
    writer.write(b"abcd")  # 4 up, 4 echoed down: the cut falls in the echo
    async with asyncio.timeout(2):
        received = await reader.read(100)
        while chunk := await reader.read(100):
            received += chunk
    writer.close()

    assert received == b"ab"
    assert proxy.cuts == 1
    assert await _roundtrip(proxy, b"later") == b"later"  # only the next connection


async def test_refuse_resets_new_connections_until_accept(proxy: ChaosProxy) -> None:
    """While refusing, a new connection is reset at once; accept() lets them in again."""
    proxy.refuse()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _roundtrip(proxy, b"x")
    assert proxy.refused == 1

    proxy.accept()

    assert await _roundtrip(proxy, b"in") == b"in"


async def test_slow_delays_each_chunk(proxy: ChaosProxy) -> None:
    """slow(d) delays each chunk by d in each direction; fast() undoes it."""
    proxy.slow(0.2)
    began = time.monotonic()
    assert await _roundtrip(proxy, b"slow") == b"slow"
    assert time.monotonic() - began >= 0.4

    proxy.fast()
    began = time.monotonic()
    assert await _roundtrip(proxy, b"fast") == b"fast"
    assert time.monotonic() - began < 0.2


async def test_slow_is_a_latency_not_a_queue(proxy: ChaosProxy) -> None:
    """Chunks in flight overlap: five, 50 ms apart, each delayed 0.2 s both ways, are all
    back in about 0.6 s, not the 1.2 s and more of delays served one after another."""
    proxy.slow(0.2)
    reader, writer = await _open(proxy)
    began = time.monotonic()
    try:
        for chunk in b"abcde":
            writer.write(bytes([chunk]))
            await writer.drain()
            await asyncio.sleep(0.05)  # the sender's pace: five separate chunks
        async with asyncio.timeout(5):
            assert await reader.readexactly(5) == b"abcde"
    finally:
        writer.close()
    assert 0.4 <= time.monotonic() - began < 1.0


async def test_close_by_a_peer_is_passed_on_and_counted(proxy: ChaosProxy) -> None:
    """A client that closes is seen by the target, and both ends are released."""
    _reader, writer = await _open(proxy)
    await _eventually(lambda: proxy.open_connections == 1, 2, "the connection")

    writer.close()
    await writer.wait_closed()

    await _eventually(lambda: proxy.open_connections == 0, 2, "the link to close")
    assert (proxy.closed_by_client, proxy.closed_by_target) == (1, 1)


async def test_aclose_ends_every_connection(echo_port: int) -> None:
    """Closing the proxy resets what is open, even during a stall, and stops listening."""
    proxy = await ChaosProxy("127.0.0.1", echo_port).start()
    reader, writer = await _open(proxy)
    proxy.stall()

    await proxy.aclose()

    async with asyncio.timeout(2):
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await reader.readexactly(1)
    writer.close()
    with pytest.raises(ConnectionRefusedError):
        await _open(proxy)
    assert proxy.state is ProxyState.CLOSED
