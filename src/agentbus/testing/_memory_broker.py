"""An in-process AMQP broker: topic exchanges, queues, competing consumers, acks, dead letters."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from agentbus._exceptions import ConfigurationError, QueueInUse, Unroutable
from agentbus.bus import topic_matches
from agentbus.testing._consumer import ConsumerCallback, MemoryConsumer
from agentbus.testing._memory_artifacts import MemoryArtifacts
from agentbus.testing._message import DeadLetter, DeadLetterReason, MemoryMessage, Queued

__all__ = ["DEFAULT_EXCHANGE", "MemoryBroker"]

DEFAULT_EXCHANGE: Final = ""
"""The default exchange: it routes a message to the queue named by its routing key."""

_DEAD_LETTER_MAX_LENGTH: Final = 100_000  # as the real dead-letter queue: x-max-length, drop-head


@dataclass(eq=False, slots=True)
class _Queue:
    name: str
    dead_letter: bool
    expires: float | None
    max_length: int | None
    messages: deque[Queued] = field(default_factory=deque)
    bindings: set[tuple[str, str]] = field(default_factory=set)
    consumers: list[MemoryConsumer] = field(default_factory=list)
    next_consumer: int = 0
    pump_scheduled: bool = False
    deleted: bool = False
    exclusive: bool = False
    single_active: bool = False
    expiry_timer: asyncio.TimerHandle | None = None
    unused_timer: asyncio.TimerHandle | None = None

    def ready_consumer(self) -> MemoryConsumer | None:
        if self.single_active:  # the first consumer alone, until it goes
            first = self.consumers[0] if self.consumers else None
            return first if first is not None and first.has_capacity else None
        # Round-robin over the consumers that still have room under their prefetch.
        count = len(self.consumers)
        for step in range(count):
            index = (self.next_consumer + step) % count
            consumer = self.consumers[index]
            if consumer.has_capacity:
                self.next_consumer = (index + 1) % count
                return consumer
        return None


class MemoryBroker:
    """An in-process broker with RabbitMQ's semantics, shared by the buses of a test.

    Topic exchanges exist once something binds to them; ``""`` is the default
    exchange, routing to the queue named by the routing key. Queues keep messages
    in order, deliver them round-robin to consumers with room under their prefetch,
    requeue what is nacked, and dead-letter (to ``dead_letters``) what is rejected
    or expires, when declared with ``dead_letter=True`` as the bus's queues are.
    Deliveries run as tasks on the event loop, never inside the publishing call.
    """

    def __init__(self) -> None:
        self.dead_letters: list[DeadLetter] = []
        self._queues: dict[str, _Queue] = {}
        self._tags = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self.journals: dict[str, list[tuple[datetime, bytes]]] = {}
        """Each journal's records (``MemoryJournal``), by name."""
        self.artifacts = MemoryArtifacts()
        """The artifacts the buses on this broker stored (what its streams would hold)."""

    def __repr__(self) -> str:
        return f"<MemoryBroker queues={len(self._queues)} dead_letters={len(self.dead_letters)}>"

    @property
    def queues(self) -> list[str]:
        """The names of the queues that exist."""
        return list(self._queues)

    def declare_queue(
        self,
        name: str,
        *,
        dead_letter: bool = True,
        expires: float | None = None,
        max_length: int | None = None,
        single_active: bool = False,
    ) -> None:
        """Create queue ``name`` if it does not exist (declaring is idempotent).

        Args:
            name: The queue name.
            dead_letter: Dead-letter rejected, expired and overflowing messages (else drop them).
            expires: Delete the queue once it has had no consumer for this many seconds.
            max_length: Keep at most this many messages waiting: the oldest go first
                (RabbitMQ's ``x-max-length`` with ``x-overflow: drop-head``).
            single_active: Deliver to the first consumer alone, then to the next once it
                goes (RabbitMQ's ``x-single-active-consumer``).

        Raises:
            ConfigurationError: the queue exists with other arguments.
        """
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = _Queue(name, dead_letter, expires, max_length)
            queue.single_active = single_active
        elif (queue.dead_letter, queue.expires, queue.max_length) != (
            dead_letter,
            expires,
            max_length,
        ):
            raise ConfigurationError(f"queue {name!r} exists with other arguments")
        self._arm_unused_timer(queue)

    def delete_queue(self, name: str) -> None:
        """Delete queue ``name`` with its messages and bindings; its consumers are cancelled."""
        queue = self._queues.pop(name, None)
        if queue is None:
            return
        queue.deleted = True
        for timer in (queue.expiry_timer, queue.unused_timer):
            if timer is not None:
                timer.cancel()
        for consumer in list(queue.consumers):
            consumer.cancel()
        queue.messages.clear()

    def bind(self, queue: str, pattern: str, *, exchange: str) -> None:
        """Bind ``queue`` to topic ``exchange`` with ``pattern`` (``*`` one word, ``#`` any)."""
        self._queue(queue).bindings.add((exchange, pattern))

    def unbind(self, queue: str, pattern: str, *, exchange: str) -> None:
        """Remove a binding made with ``bind``."""
        self._queue(queue).bindings.discard((exchange, pattern))

    def consumer_count(self, queue: str) -> int | None:
        """How many consumers ``queue`` has; None if it does not exist."""
        found = self._queues.get(queue)
        return None if found is None else len(found.consumers)

    def message_count(self, queue: str) -> int:
        """Return how many messages wait in ``queue`` (not counting unacked deliveries)."""
        return len(self._queue(queue).messages)

    def publish(
        self, message: MemoryMessage, routing_key: str, *, exchange: str, mandatory: bool = False
    ) -> int:
        """Route a copy of ``message`` to each matching queue; return how many got one.

        Raises:
            Unroutable: ``mandatory`` and no queue matched.
        """
        targets = self._route(exchange, routing_key)
        if not targets:
            if mandatory:
                raise Unroutable(
                    f"no queue is bound for routing key {routing_key!r}: nobody serves it",
                    details={"routing_key": routing_key},
                )
            return 0
        expires_at = None
        if message.expiration is not None:
            expires_at = time.monotonic() + message.expiration
        queued = Queued(message, exchange, routing_key, expires_at)
        for queue in targets:
            queue.messages.append(queued)
            if queue.max_length is not None and len(queue.messages) > queue.max_length:
                self._dead_letter(queue.name, queue.messages.popleft(), "maxlen")
            self._schedule(queue.name)
        return len(targets)

    def _route(self, exchange: str, routing_key: str) -> list[_Queue]:
        if exchange == DEFAULT_EXCHANGE:
            queue = self._queues.get(routing_key)
            return [] if queue is None else [queue]
        return [
            queue
            for queue in self._queues.values()
            if any(
                bound == exchange and topic_matches(pattern, routing_key)
                for bound, pattern in queue.bindings
            )
        ]

    def consume(
        self,
        queue: str,
        callback: ConsumerCallback,
        *,
        prefetch: int = 0,
        no_ack: bool = False,
        exclusive: bool = False,
    ) -> MemoryConsumer:
        """Start consuming ``queue``: ``callback`` is called, in its own task, per delivery.

        With ``no_ack`` each message counts as acknowledged once delivered (prefetch
        does not apply), as AMQP's ``basic.consume`` with ``no-ack``. ``exclusive``: the
        queue alone, as RabbitMQ's exclusive consumer.

        Raises:
            QueueInUse: ``exclusive`` and the queue has a consumer, or it has an exclusive
                consumer.
        """
        if prefetch < 0:
            raise ConfigurationError("prefetch must be 0 (no bound) or more")
        target = self._queue(queue)
        if target.consumers and (exclusive or target.exclusive):
            raise QueueInUse(f"queue {queue!r} is in exclusive use")
        target.exclusive = exclusive
        consumer = MemoryConsumer(self, queue, callback, 0 if no_ack else prefetch, no_ack=no_ack)
        target.consumers.append(consumer)
        if target.unused_timer is not None:
            target.unused_timer.cancel()
            target.unused_timer = None
        self._schedule(queue)
        return consumer

    async def idle(self) -> None:
        """Wait until nothing moves: no delivery running, and none about to be made.

        Messages may still wait in queues nobody consumes (or whose consumers are
        full); a handler that never returns keeps this waiting too.
        """
        current = asyncio.current_task()
        while True:
            running = {task for task in self._tasks if task is not current}
            if running:
                await asyncio.wait(running)
            elif any(queue.pump_scheduled for queue in self._queues.values()):
                await asyncio.sleep(0)  # let the scheduled deliveries be made
            else:
                return

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            raise ConfigurationError(f"no queue {name!r}: declare it first")
        return queue

    def _next_tag(self) -> int:
        return next(self._tags)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _detach(self, consumer: MemoryConsumer) -> None:
        queue = self._queues.get(consumer.queue)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.consumers.remove(consumer)
        queue.next_consumer = 0
        if not queue.consumers:
            queue.exclusive = False
        self._arm_unused_timer(queue)

    def _requeue(self, name: str, queued: Queued) -> None:
        queue = self._queues.get(name)
        if queue is None:
            return
        # RabbitMQ puts a requeued message back near its old place: at the head.
        queue.messages.appendleft(replace(queued, redelivered=True))
        self._schedule(name)

    def _dead_letter(self, name: str, queued: Queued, reason: DeadLetterReason) -> None:
        queue = self._queues.get(name)
        if queue is None or not queue.dead_letter:
            return
        letter = DeadLetter(name, queued.exchange, queued.routing_key, reason, queued.message)
        self.dead_letters.append(letter)
        if len(self.dead_letters) > _DEAD_LETTER_MAX_LENGTH:
            del self.dead_letters[0]

    def _schedule(self, name: str) -> None:
        queue = self._queues.get(name)
        if queue is None or queue.pump_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first consumer starts the queue moving
        queue.pump_scheduled = True
        loop.call_soon(self._pump, queue)

    def _pump(self, queue: _Queue) -> None:
        queue.pump_scheduled = False
        if queue.deleted:
            return
        now = time.monotonic()
        while queue.messages:
            head = queue.messages[0]
            # Per-message TTL, as RabbitMQ applies it: checked when a message reaches the head.
            if head.expires_at is not None and head.expires_at <= now:
                queue.messages.popleft()
                self._dead_letter(queue.name, head, "expired")
                continue
            consumer = queue.ready_consumer()
            if consumer is None:
                break
            queue.messages.popleft()
            consumer._deliver(head)
        self._arm_expiry_timer(queue)

    def _arm_expiry_timer(self, queue: _Queue) -> None:
        # A message waiting at the head expires on time even if nobody consumes.
        if queue.expiry_timer is not None:
            queue.expiry_timer.cancel()
            queue.expiry_timer = None
        if not queue.messages or queue.messages[0].expires_at is None:
            return
        delay = max(queue.messages[0].expires_at - time.monotonic(), 0.0)
        loop = asyncio.get_running_loop()
        queue.expiry_timer = loop.call_later(delay, self._schedule, queue.name)

    def _arm_unused_timer(self, queue: _Queue) -> None:
        if queue.expires is None or queue.consumers:
            return
        if queue.unused_timer is not None:
            queue.unused_timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        queue.unused_timer = loop.call_later(queue.expires, self._expire_queue, queue)

    def _expire_queue(self, queue: _Queue) -> None:
        if not queue.deleted and not queue.consumers and self._queues.get(queue.name) is queue:
            self.delete_queue(queue.name)
