"""Memories of request message ids already served: the seam, and the in-process default."""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeGuard

from agentbus._exceptions import EnvelopeError
from agentbus.envelopes import ErrorEnvelope, ResponseEnvelope, decode, encode

__all__ = [
    "Completer",
    "DedupStore",
    "DedupWindow",
    "Seen",
    "SharedDedupStore",
    "completer",
    "is_shared",
]

Reply = ResponseEnvelope | ErrorEnvelope


@dataclass(slots=True)
class Seen:
    """A request seen before: when, and its reply once there is one.

    ``elsewhere``: it is running now in another process (a shared store's sighting), whose
    reply is not there yet.
    """

    at: float
    reply: Reply | None = None
    reply_to: str | None = None
    elsewhere: bool = False
    holder: str | None = None
    """Elsewhere: the process that runs it, as the store names it (``host:pid:token``)."""


@dataclass(slots=True)
class _Entry:
    # A reply is kept encoded: a few hundred bytes instead of 3 KiB of models, for up to
    # dedup_size of them. It is decoded again only for a duplicate, which is rare.
    at: float
    reply: bytes | Reply | None = None
    reply_to: str | None = None

    def seen(self) -> Seen:
        reply = self.reply
        if isinstance(reply, bytes):
            decoded = decode(reply, max_size=None)
            assert isinstance(decoded, ResponseEnvelope | ErrorEnvelope)
            reply = decoded
        return Seen(at=self.at, reply=reply, reply_to=self.reply_to)


class DedupStore(Protocol):
    """Where a bus's dispatcher remembers the requests it took, to serve each one once.

    ``check_in`` when a request arrives; ``complete`` once its work is done (before the
    reply goes out); ``forget`` when the work was abandoned and may run again. Calls are
    synchronous and on the event loop: an implementation must be quick (memory, a local file).
    """

    def check_in(self, message_id: str) -> Seen | None:
        """Return the earlier sighting of ``message_id``, or record this one and return None."""
        ...

    def complete(
        self,
        message_id: str,
        reply: Reply | None,
        reply_to: str | None,
        body: bytes | None = None,
    ) -> None:
        """Keep the reply sent for ``message_id``, to answer a duplicate with it.

        ``body``: the reply as encoded for the wire, when the caller has it.
        """
        ...

    def forget(self, message_id: str) -> None:
        """Drop ``message_id``: its work was not done and may run again."""
        ...

    def close(self) -> None:
        """Release what the store holds open (the bus is closing)."""
        ...


class SharedDedupStore(Protocol):
    """A de-duplication store shared by processes on any host, over the network.

    Its calls are awaited. The bus keeps an in-process ``DedupWindow`` in front of it
    (a copy that comes back to the process that runs it never asks the network), and asks
    this store about requests the window has not seen. A call that fails (the store is
    unreachable) raises; the bus then serves on what the window knows (fail open).
    """

    async def check_in(self, key: str) -> Seen | None:
        """Take ``key`` for this process (None), or return the sighting that holds it:
        a reply stored by whoever ran it, or ``Seen(elsewhere=True)`` while it runs."""
        ...

    async def complete(
        self, key: str, reply: Reply | None, reply_to: str | None, body: bytes | None
    ) -> None:
        """Store the reply of ``key``, for every process to answer a duplicate with."""
        ...

    async def forget(self, key: str) -> None:
        """Let go of ``key``: its work was abandoned here and may run again anywhere."""
        ...

    async def aclose(self) -> None:
        """Release the connections (the bus is closing); what is stored stays."""
        ...


def is_shared(store: DedupStore | SharedDedupStore) -> TypeGuard[SharedDedupStore]:
    """Whether ``store`` is a ``SharedDedupStore`` (its calls are awaited)."""
    return inspect.iscoroutinefunction(store.check_in)


Completer = Callable[[str, Reply | None, str | None, bytes | None], None]
"""``complete(message_id, reply, reply_to, body)`` of a store."""


def completer(store: DedupStore) -> Completer:
    """Return ``store.complete``, or, for a store whose ``complete`` takes no ``body`` (one
    written before it had one), a call that leaves the body out."""
    try:
        parameters = list(inspect.signature(store.complete).parameters.values())
    except (TypeError, ValueError):  # no signature to read: call it the old way
        parameters = []
    if any(p.name == "body" or p.kind is p.VAR_KEYWORD for p in parameters):
        return store.complete

    def complete(
        message_id: str, reply: Reply | None, reply_to: str | None, body: bytes | None
    ) -> None:
        store.complete(message_id, reply, reply_to)

    return complete


class DedupWindow:
    """Remember request ids for ``window`` seconds, at most ``size`` of them, in this process.

    The default store: a request redelivered to this process is served once; one
    redelivered to another instance is not seen here (see ``SqliteDedupStore``).
    """

    def __init__(
        self, window: float, size: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window
        self._size = size
        self._clock = clock
        self._seen: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def check_in(self, message_id: str) -> Seen | None:
        """Return the earlier sighting of ``message_id``, or record this one and return None."""
        if self._size == 0 or self._window == 0:
            return None
        now = self._clock()
        self._expire(now)
        entry = self._seen.get(message_id)
        if entry is not None:
            return entry.seen()
        self._seen[message_id] = _Entry(at=now)
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return None

    def complete(
        self,
        message_id: str,
        reply: Reply | None,
        reply_to: str | None,
        body: bytes | None = None,
    ) -> None:
        """Keep the reply sent for ``message_id``, to answer a duplicate with it."""
        entry = self._seen.get(message_id)
        if entry is not None:
            try:
                if body is None and reply is not None:
                    body = encode(reply, max_size=None)
                # Copied: orjson's output keeps a 4 KiB buffer however short the JSON is.
                entry.reply = None if body is None else bytes(memoryview(body))
            except EnvelopeError:  # not JSON: the dispatcher answers with an error instead
                entry.reply = reply
            entry.reply_to = reply_to

    def forget(self, message_id: str) -> None:
        """Drop ``message_id``: its work was not done and may run again."""
        self._seen.pop(message_id, None)

    def close(self) -> None:
        """Nothing to release: the memory goes with the process."""

    def _expire(self, now: float) -> None:
        horizon = now - self._window
        while self._seen:
            oldest = next(iter(self._seen.values()))
            if oldest.at >= horizon:
                break
            self._seen.popitem(last=False)
