"""Requests going out: a cap on how many at once, and the wait for each one's reply."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, Unpack

from pydantic import ValidationError

from agentbus._exceptions import (
    AgentBusError,
    EnvelopeError,
    InputRequired,
    NoInstance,
    RemoteError,
    RequestTimeout,
    Unroutable,
)
from agentbus._logging import get_logger
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.bus._options import PublishOptions
from agentbus.bus._pending import PendingRequests, ProgressCallback, Reply
from agentbus.bus._stats import BusStats
from agentbus.envelopes import (
    BROADCAST,
    ErrorCode,
    ErrorEnvelope,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    ResponseStatus,
)

__all__ = ["Presence", "RequestPublisher", "Requester", "Slots"]

Presence = Callable[[str], Awaitable[bool | None]]
"""Whether the receiver's queue holds requests and no consumer; None: it has no queue."""

_log = get_logger("agentbus.bus")
_MAX_LOOKS = 1024
_LOOKS_AT_ONCE = 8  # each look opens a channel: a saturated process must not open thousands
_SWEEP_SLICES = 8  # the presence sweep wakes at most this often per presence_after


class RequestPublisher(Protocol):
    """Publishes a request (the bus's publisher)."""

    async def publish(
        self, envelope: RequestEnvelope, **options: Unpack[PublishOptions]
    ) -> None: ...


class Slots:
    """At most ``size`` holders at once (callers past that wait), and how many hold one."""

    __slots__ = ("_semaphore", "taken")

    def __init__(self, size: int) -> None:
        self._semaphore = asyncio.Semaphore(size)
        self.taken = 0

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()
        self.taken += 1

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.taken -= 1
        self._semaphore.release()


class Requester:
    """Sends requests and waits for their replies, at most ``max_outstanding`` out at once."""

    def __init__(
        self,
        pending: PendingRequests,
        stats: BusStats,
        max_outstanding: int,
        *,
        presence: Presence | None = None,
        presence_after: float = 0.0,
    ) -> None:
        self.pending = pending
        self.slots = Slots(max_outstanding)
        self._stats = stats
        self._presence = presence
        self._presence_after = presence_after
        self._checks: set[asyncio.Task[None]] = set()
        self._looking = asyncio.Semaphore(_LOOKS_AT_ONCE)
        self._looks: dict[str, tuple[float, asyncio.Future[bool | None]]] = {}
        """The last look at each receiver's queue: when it began, and its answer."""
        self._watched: collections.deque[tuple[float, str, asyncio.Future[Reply], bool]]
        self._watched = collections.deque()
        """Requests sent, oldest first: when their check is due, their receiver, their
        answer, and whether they went unconfirmed (no queue then means unroutable)."""
        self._sweeper: asyncio.Task[None] | None = None

    def close(self) -> None:
        """Stop the presence sweep (the bus is closing)."""
        self._watched.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def send(
        self,
        publisher: RequestPublisher | None,
        envelope: RequestEnvelope,
        *,
        reply_to: str | None,
        timeout: float,
        on_progress: ProgressCallback | None,
        persistent: bool = True,
        presence: bool = True,
        confirm: bool = True,
    ) -> ResponseEnvelope:
        """Publish ``envelope`` and return its response; with no ``publisher``, only wait for
        the response to ``envelope``, sent before. ``confirm``: see ``PublishOptions``;
        without it, a receiver with no queue is found by the presence check.

        Raises:
            RemoteError: the receiver answered with an error envelope.
            RequestTimeout: no answer within ``timeout`` seconds.

        ``presence``: check this site's queue of the receiver when the answer is late
        (not for a request sent to another site).
        """
        span = start_span(
            f"send {envelope.receiver_id}",
            "producer",
            envelope.metadata.trace,
            {"messaging.operation.type": "send", "messaging.message.id": envelope.message_id},
        )
        if span is not None:  # the receiver's spans go under this one
            trace = child_trace(span, envelope.metadata.trace)
            metadata = envelope.metadata.model_copy(update={"trace": trace})
            envelope = envelope.model_copy(update={"metadata": metadata})
        message_id = envelope.message_id
        future = self.pending.add(message_id, on_progress)
        started = time.perf_counter()
        outcome = "success"
        try:
            async with asyncio.timeout(timeout), self.slots:
                if publisher is not None:
                    await publisher.publish(
                        envelope,
                        reply_to=reply_to,
                        ttl=timeout,
                        timeout=timeout,
                        persistent=persistent,
                        confirm=confirm,
                    )
                # From the publish on: a request still waiting to go out is nobody's fault.
                if presence:
                    # A broadcast has no queue of its own to look at: never unroutable here.
                    unrouted = not confirm and envelope.receiver_id != BROADCAST
                    self._watch(envelope.receiver_id, future, timeout, unrouted)
                reply = await future
            if isinstance(reply, ErrorEnvelope):
                outcome = reply.payload.code
        except TimeoutError as exc:
            outcome = ErrorCode.TIMEOUT
            raise RequestTimeout(
                f"no answer from {envelope.receiver_id!r} to {envelope.payload.action!r} "
                f"within {timeout:g} s",
                details={"receiver": envelope.receiver_id, "timeout": timeout},
            ) from exc
        except AgentBusError as exc:
            outcome = exc.code
            raise
        finally:
            end_span(span, outcome)
            self.pending.discard(message_id)
            if self._stats.observer is not None:
                seconds = time.perf_counter() - started
                self._stats.observer.observe_request(envelope.payload.action, outcome, seconds)
        if isinstance(reply, ErrorEnvelope):
            self._stats.errors_received[reply.payload.code] += 1
            asked = _asked(reply)
            if asked is not None:
                raise InputRequired(asked, reply)
            raise RemoteError(reply)
        if reply.payload.status == ResponseStatus.INPUT_REQUIRED:
            raise InputRequired(_question(reply.payload.result, reply), reply)
        return reply

    def _watch(
        self, receiver: str, future: asyncio.Future[Reply], timeout: float, unconfirmed: bool
    ) -> None:
        # A request still waiting after presence_after checks that something consumes its
        # receiver's queue. One sweep per requester finds them, not a timer per request:
        # a request answered in time costs an append, and is dropped when the sweep passes.
        if self._presence is None or not 0 < self._presence_after < timeout:
            return
        loop = asyncio.get_running_loop()
        self._watched.append((loop.time() + self._presence_after, receiver, future, unconfirmed))
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        loop, watched = asyncio.get_running_loop(), self._watched
        try:
            while watched:
                now = loop.time()
                while watched and watched[0][0] <= now:
                    _, receiver, future, unconfirmed = watched.popleft()
                    if not future.done():
                        self._start_check(receiver, future, unconfirmed)
                if watched:  # the next due, but not sooner than a slice: a few wakes a second
                    await asyncio.sleep(
                        max(watched[0][0] - now, self._presence_after / _SWEEP_SLICES)
                    )
        finally:
            self._sweeper = None

    def _start_check(self, receiver: str, future: asyncio.Future[Reply], unconfirmed: bool) -> None:
        task = asyncio.create_task(self._check(receiver, future, unconfirmed))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check(self, receiver: str, future: asyncio.Future[Reply], unconfirmed: bool) -> None:
        try:
            async with self._looking:
                if future.done():  # answered (or failed) while this check waited its turn
                    return
                unserved = await self._unserved(receiver)
        except AgentBusError as exc:
            _log.debug("presence not checked", receiver=receiver, error=str(exc))
            return
        if future.done():
            return
        if unserved is None and unconfirmed:
            # No confirm came back to say it was routed: with no queue, nothing took it.
            future.set_exception(
                Unroutable(
                    f"no queue is bound for {receiver!r}: nobody serves it",
                    details={"receiver": receiver},
                )
            )
        elif unserved:
            self._stats.no_instance += 1
            future.set_exception(
                NoInstance(
                    f"no instance of {receiver!r} is running: its queue has no consumer "
                    "(the request stays queued until it expires)",
                    details={"receiver": receiver},
                )
            )

    async def _unserved(self, receiver: str) -> bool | None:
        # One look per receiver at a time, and its answer good for presence_after: a
        # backlog of thousands of slow requests to one service costs one passive declare.
        loop = asyncio.get_running_loop()
        cached = self._looks.get(receiver)
        if cached is None or (cached[1].done() and loop.time() - cached[0] > self._presence_after):
            assert self._presence is not None
            look = asyncio.ensure_future(self._presence(receiver))
            cached = self._looks[receiver] = (loop.time(), look)
            look.add_done_callback(_retrieved)
            if len(self._looks) > _MAX_LOOKS:
                self._looks.pop(next(iter(self._looks)))
        return await asyncio.shield(cached[1])


def _asked(reply: ErrorEnvelope) -> Question | None:
    # An agent tells a caller before 1.2 of its question by this error; a 1.2 caller that
    # sent an older version on purpose (a raw envelope) still gets it as a question.
    if reply.payload.code != ErrorCode.INPUT_REQUIRED:
        return None
    try:
        return Question.model_validate(reply.payload.details.get("question"))
    except ValidationError:
        return None


def _question(result: object, reply: ResponseEnvelope) -> Question:
    try:
        return Question.model_validate(result)
    except ValidationError as exc:
        raise EnvelopeError(
            f"an input_required response from {reply.sender_id!r} holds no question: {exc}"
        ) from exc


def _retrieved(look: asyncio.Future[bool | None]) -> None:
    # A failed look nobody awaits any more must not be reported as never retrieved.
    if not look.cancelled():
        look.exception()
