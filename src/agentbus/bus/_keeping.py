"""What the broker keeps for a bus: journals, conversation journals, durable reply queues
and leases."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Iterable

from agentbus._exceptions import ConfigurationError
from agentbus._topology import Topology
from agentbus.bus._dispatch import Dispatcher
from agentbus.bus._held import HeldAnswers
from agentbus.bus._hooks import Journal
from agentbus.bus._lease import Lease
from agentbus.bus._pending import PendingRequests
from agentbus.envelopes import is_valid_id

__all__ = ["Keeping", "checked"]


def checked(value: str, what: str) -> str:
    """Return ``value`` if it is a valid id (a name in a queue's name).

    Raises:
        ConfigurationError: it is not.
    """
    if not is_valid_id(value):
        raise ConfigurationError(f"{what} {value!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]")
    return value


class Keeping(abc.ABC):
    """Journals and reply queues, as every bus opens them through its broker's hooks."""

    topology: Topology
    _pending: PendingRequests
    _held: HeldAnswers

    @abc.abstractmethod
    def _require_open(self) -> Dispatcher:
        """The dispatcher, while the bus is open; else raise ``BusClosed``."""

    @abc.abstractmethod
    async def _open_journal(self, queue: str, max_age: str) -> Journal:
        """Declare the journal's stream (or find it again) and return it."""

    @abc.abstractmethod
    async def _open_reply_queue(
        self, queue: str, *, hold: bool, exclusive: bool = False
    ) -> Callable[[bool], Awaitable[None]]:
        """Declare a durable reply queue and take its replies."""

    @abc.abstractmethod
    async def _open_lease(self, queue: str, lease: Lease) -> None:
        """Declare the lease's queue, put a token in, and wait in line for it."""

    async def journal(self, name: str, *, max_age: str = "7D") -> Journal:
        """Open the journal ``name``: an append-only log every process reads back; on
        RabbitMQ a stream, kept ``max_age`` (``7D``, ``12h``), replicated on a cluster.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        queue = self.topology.journal_queue(checked(name, "journal name"))
        return await self._open_journal(queue, max_age)

    async def conversations(self, service: str, *, max_age: str = "7D") -> Journal:
        """Open ``service``'s journal of questions (its user alone reads it), as ``journal``."""
        self._require_open()
        queue = self.topology.conversations(checked(service, "service name"))
        return await self._open_journal(queue, max_age)

    async def reply_queue(
        self,
        name: str,
        *,
        expect: Iterable[str] = (),
        hold: bool = False,
        exclusive: bool = False,
    ) -> Callable[[bool], Awaitable[None]]:
        """Declare the durable reply queue ``name`` and take the replies that reach it.

        A request sent with ``reply_to=`` that queue is answered there; a bus that opens
        the same queue later (another process, after this one died) gets the answers that
        came meanwhile. ``expect``: ids of requests sent before whose answers may wait
        there already; each is kept for this bus's ``send_request`` under that id.
        With ``hold``, an answer that a request of this bus waits for stays on the queue,
        unacknowledged, until ``release`` lets it go: the requester makes it durable
        elsewhere first (a journal), so a process that dies before that leaves the
        answer to whoever opens the queue next. Answers not let go when the queue stops,
        or the bus closes, go back to the queue. ``exclusive``: take the queue alone, or
        not at all (a lock: ``QueueInUse`` while another consumer has it).
        Returns what stops taking them: ``await stop(True)`` also deletes the queue.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
            QueueInUse: ``exclusive``, and another consumer takes the queue.
        """
        self._require_open()
        queue = self.topology.reply_queue(checked(name, "name"))
        for message_id in expect:
            self._pending.add(message_id)
        stop = await self._open_reply_queue(queue, hold=hold, exclusive=exclusive)
        if not hold:
            return stop

        async def stop_held(delete: bool) -> None:
            await self._held.acked(queue)
            try:
                await stop(delete)
            finally:
                self._held.abandon(queue)

        return stop_held

    async def lease(self, name: str) -> Lease:
        """Ask for the lease ``name``: one holder at a time among the buses that ask.

        Returns at once; ``await lease.acquired()`` waits until this bus holds it. It is
        held until ``lease.aclose()``, or until the connection that holds it goes (then
        the broker hands it to the next bus in line: on RabbitMQ, a queue's single active
        consumer and a token message held unacknowledged).

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        lease = Lease(checked(name, "lease name"))
        await self._open_lease(self.topology.lease_queue(name), lease)
        return lease

    def release(self, message_id: str) -> bool:
        """Let the held answer to request ``message_id`` leave its reply queue (``hold``).

        Returns whether an answer was held for it.
        """
        return self._held.release(message_id)

    def release_all(self, name: str) -> int:
        """Let every answer held on the reply queue ``name`` leave it (``hold``), whatever
        request it answers: the queue goes on taking replies, for another use.

        Returns how many answers were held.
        """
        return self._held.release_from(self.topology.reply_queue(name))
