"""A de-duplication store on Redis (or Valkey), shared by every instance on every host.

Set ``AGENTBUS_DEDUP_URL`` (``Settings.dedup_url``, e.g. ``redis://dedup:6379/0``) to the
same server for every instance of a service, and install the ``redis`` extra. A request's
message id is one key, ``<exchange>:dedup:<message id>``:

- ``check_in`` takes the key with a running marker of this process, in one atomic round
  trip (a script: take it if it is free, else return what holds it). Of two copies taken
  at once on two hosts, one runs and the other learns who holds it. The marker lives
  ``lease`` seconds and its owner renews it while the work runs, so a marker whose process
  died expires and a copy waiting elsewhere then runs the request.
- ``complete`` replaces the marker with the reply as it went on the wire, kept ``window``
  seconds: a copy on any host is answered with it and does not run.
- ``forget`` (the work was abandoned: cancelled, drained) deletes the marker if it is
  still this process's.

A failed call (the server unreachable, a timeout) raises ``DedupUnavailable``; for
``retry_after`` seconds after one the server is not asked again, so an outage costs each
request a look at the clock, not a timeout. The bus then serves on what its in-process
window knows: fail open (see docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agentbus._config import mask_url
from agentbus._exceptions import ConfigurationError, EnvelopeError
from agentbus._logging import get_logger
from agentbus.bus._stores._dedup import Reply, Seen
from agentbus.envelopes import ErrorEnvelope, ResponseEnvelope, decode, encode

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["DedupUnavailable", "RedisDedupStore"]

T = TypeVar("T")

LEASE: Final = 10.0  # seconds a running marker lives unless its owner renews it
_MAX_REPLY: Final = 16 * 1024 * 1024  # larger replies are stored as "done", without the reply
_RUNNING: Final = b"r"
_DONE: Final = b"d"

# Take KEYS[1] for ARGV[1] (the marker) for ARGV[2] ms if it is free; else return its value.
_TAKE: Final = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
# Renew, for ARGV[2] ms, each of KEYS still holding the marker ARGV[1].
_RENEW: Final = """
local renewed = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    renewed = renewed + 1
  end
end
return renewed
"""
# Delete KEYS[1] if it still holds the marker ARGV[1].
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_log = get_logger("agentbus.bus")


class DedupUnavailable(Exception):
    """The shared de-duplication store could not be asked (unreachable, timed out)."""


class RedisDedupStore:
    """Requests taken and served by any instance, in Redis (a ``SharedDedupStore``).

    Args:
        url: ``redis://``, ``rediss://`` (TLS) or ``unix://``, as redis-py takes it.
        window: Seconds a served request's reply is kept.
        namespace: The keys' prefix (the bus's exchange): teams on one server stay apart.
        lease: Seconds a running marker lives without its owner's renewal; a copy waiting
            on a process that died runs after at most this long.
        timeout: Seconds to connect, and to wait for an answer.
        retry_after: Seconds the server is not asked again after a failed call.
        clock: Monotonic seconds; for tests.

    Raises:
        ConfigurationError: the ``redis`` extra is not installed.
    """

    def __init__(
        self,
        url: str,
        window: float,
        *,
        namespace: str = "agentbus",
        lease: float = LEASE,
        timeout: float = 1.0,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import RedisError
        except ImportError as exc:
            raise ConfigurationError(
                "a shared de-duplication store needs the redis client: "
                "pip install 'agentbus[redis]'"
            ) from exc
        self.url = url
        self._window_ms = max(1, int(window * 1000))
        self._lease_s = lease
        self._lease_ms = max(1, int(lease * 1000))
        self._prefix = f"{namespace}:dedup:"
        self._retry_after = retry_after
        self._clock = clock
        self._down_until = 0.0
        self._failures: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        # One retry, at once: a pooled connection that died with a server restart is
        # noticed on use, and the retry opens a fresh one.
        self._client: Redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
        self._take: AsyncScript = self._client.register_script(_TAKE)
        self._renew: AsyncScript = self._client.register_script(_RENEW)
        self._release: AsyncScript = self._client.register_script(_RELEASE)
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._marker = _RUNNING + token.encode()
        self._owned: set[str] = set()  # keys this process holds with its running marker
        self._renewing: asyncio.Task[None] | None = None
        self.renewals = 0
        """Rounds of renewal of this process's running markers, so far."""

    def __repr__(self) -> str:
        return f"<RedisDedupStore {mask_url(self.url)} running={len(self._owned)}>"

    def __len__(self) -> int:
        return len(self._owned)

    async def check_in(self, key: str) -> Seen | None:
        """Take ``key`` for this process (None), or return what holds it.

        A stored reply: the request was served. ``Seen(elsewhere=True)``: another process
        runs it now. ``Seen()`` without a reply: this process runs it already.

        Raises:
            DedupUnavailable: the server could not be asked.
        """
        name = self._prefix + key
        held = await self._call(partial(self._take, [name], [self._marker, self._lease_ms]))
        if held is None or (held == self._marker and key not in self._owned):
            # Free, or this process's marker left by a run it no longer has: ours.
            self._owned.add(key)
            self._renew_in_background()
            return None
        return _sighting(bytes(held), self._marker, self._clock())

    async def complete(
        self, key: str, reply: Reply | None, reply_to: str | None, body: bytes | None
    ) -> None:
        """Store the reply of ``key`` for ``window`` seconds, in place of the marker.

        Raises:
            DedupUnavailable: the server could not be asked.
        """
        self._owned.discard(key)
        if reply is not None and (body is None or len(body) > _MAX_REPLY):
            try:
                body = encode(reply, max_size=_MAX_REPLY)
            except EnvelopeError:  # kept as served without a reply: a copy is acked, not run
                body = None
        value = _DONE + (reply_to or "").encode() + b"\0" + (body or b"")
        await self._call(partial(self._client.set, self._prefix + key, value, px=self._window_ms))

    async def forget(self, key: str) -> None:
        """Delete this process's marker of ``key``: the work may run again anywhere.

        Raises:
            DedupUnavailable: the server could not be asked (the marker then expires
                after its lease).
        """
        self._owned.discard(key)
        await self._call(partial(self._release, [self._prefix + key], [self._marker]))

    async def aclose(self) -> None:
        """Stop renewing and close the connections; what is stored stays."""
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        await self._client.aclose()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._clock() < self._down_until:
            raise DedupUnavailable(f"{mask_url(self.url)} failed less than a moment ago")
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            result = await call()
        except self._failures as exc:
            self._down_until = self._clock() + self._retry_after
            raise DedupUnavailable(f"{mask_url(self.url)}: {type(exc).__name__}: {exc}") from exc
        if task is not None and task.cancelling() > cancelling:
            # Cancelled during the call, and the cancellation swallowed on the way: redis-py
            # sends through asyncio.wait_for, which on Python 3.11 returns a result that was
            # ready when the cancel came instead of raising (CPython gh-86296). Raised here,
            # so a closing channel or a drain still stops the delivery.
            raise asyncio.CancelledError
        return result

    def _renew_in_background(self) -> None:
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew_markers())

    async def _renew_markers(self) -> None:
        # Renews the markers of the work running here until none is left.
        while self._owned:
            await asyncio.sleep(self._lease_s / 3)
            keys: list[Any] = [self._prefix + key for key in self._owned]
            if not keys:
                return
            try:
                await self._call(partial(self._renew, keys, [self._marker, self._lease_ms]))
            except DedupUnavailable as exc:
                _log.info("running markers not renewed", error=str(exc))
            else:
                self.renewals += 1


def _sighting(held: bytes, marker: bytes, at: float) -> Seen:
    if held.startswith(_RUNNING):
        # Another process's marker, or this one's on a run still going here.
        holder = held[len(_RUNNING) :].decode(errors="replace")
        return Seen(at=at, elsewhere=held != marker, holder=holder)
    head, _, body = held[1:].partition(b"\0")
    reply_to = head.decode() or None
    return Seen(at=at, reply=_decoded(body) if body else None, reply_to=reply_to)


def _decoded(body: bytes) -> Reply | None:
    try:
        envelope = decode(body, max_size=_MAX_REPLY)
    except EnvelopeError as exc:  # written by another version: answered without a reply
        _log.warning("stored reply unreadable", error=exc.message)
        return None
    return envelope if isinstance(envelope, ResponseEnvelope | ErrorEnvelope) else None
