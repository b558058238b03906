"""Names and routing keys of the wire contract, and AMQP topic matching.

Beneath both the bus and security (admission checks routing keys, the definitions name
queues): ``agentbus.bus`` exports the public names.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final, NamedTuple

from agentbus.envelopes import BROADCAST, Envelope, EventEnvelope, RequestEnvelope

__all__ = [
    "DIRECT_REPLY_TO",
    "SCHEDULES_LEASE",
    "SITE_HEADER",
    "Destination",
    "Topology",
    "lease_arguments",
    "reply_destination",
    "reply_routing_key",
    "routing_key",
    "topic_matches",
]

DIRECT_REPLY_TO: Final = "amq.rabbitmq.reply-to"
"""RabbitMQ's pseudo-queue for replies straight to the requesting channel."""

SITE_HEADER: Final = "agentbus-site"
"""The AMQP header a broadcast carries its sender's site in (docs/sites.md)."""

SCHEDULES_LEASE: Final = "schedules"
"""The lease the leaders take turns under to run the schedules."""
_LEASE_EXPIRES: Final = 7 * 86400 * 1000  # ms unused before the broker removes the queue


def lease_arguments(*, quorum: bool) -> dict[str, object]:
    """The arguments of a lease's queue, as the bus declares it and the definitions do."""
    arguments: dict[str, object] = {
        "x-single-active-consumer": True,
        "x-max-length": 1,
        "x-overflow": "drop-head",
        "x-expires": _LEASE_EXPIRES,  # no holder for a week: a bus declares it anew
    }
    return {"x-queue-type": "quorum", **arguments} if quorum else arguments


@dataclass(frozen=True, slots=True)
class Topology:
    """The exchange and queue names derived from one exchange name."""

    exchange: str

    @property
    def dead_letter_exchange(self) -> str:
        """The fanout exchange that undeliverable messages are dead-lettered to."""
        return f"{self.exchange}.dlx"

    @property
    def dead_letter_queue(self) -> str:
        """The durable queue that keeps dead-lettered messages for inspection."""
        return f"{self.exchange}.dead-letter"

    @property
    def audit_stream(self) -> str:
        """The stream (``x-queue-type: stream``) that keeps the audit trail."""
        return f"{self.exchange}.audit"

    def service_queue(self, service: str) -> str:
        """Return the shared queue every instance of ``service`` consumes."""
        return f"{self.exchange}.service.{service}"

    def instance_queue(self, agent_id: str) -> str:
        """Return the queue of one agent instance."""
        return f"{self.exchange}.instance.{agent_id}"

    def reply_queue(self, name: str) -> str:
        """The named reply queue ``name`` (a plan's, which outlives the leader running it)."""
        return f"{self.exchange}.replies.{name}"

    def journal_queue(self, name: str) -> str:
        """The stream holding the journal ``name``."""
        return f"{self.exchange}.journal.{name}"

    def lease_queue(self, name: str) -> str:
        """The queue of the lease ``name``: a single active consumer and its token."""
        return f"{self.exchange}.lease.{name}"

    def conversations(self, service: str) -> str:
        """The stream holding the questions ``service``'s skills asked (docs/conversations.md)."""
        return f"{self.exchange}.service.{service}.conversations"

    def artifact_stream(self, writer: str, reader: str) -> str:
        """The stream holding the artifacts broker user ``writer`` stored for ``reader``
        (docs/artifacts.md): those two users alone may read it."""
        return f"{self.exchange}.artifacts.{writer}.{reader}"

    def artifact_pair(self, stream: str) -> tuple[str, str] | None:
        """The ``(writer, reader)`` of an artifact stream of this team; None for another
        queue."""
        prefix = f"{self.exchange}.artifacts."
        writer, dot, reader = stream.removeprefix(prefix).partition(".")
        if not stream.startswith(prefix) or not dot or not writer or "." in reader or not reader:
            return None
        return writer, reader

    def outbox(self, site: str) -> str:
        """The exchange whose messages the federation link carries to ``site`` (docs/sites.md)."""
        return f"{self.exchange}.outbox.{site}"

    @property
    def site_beacons(self) -> str:
        """The headers exchange that sorts heartbeats by their site into ``site_beacon``s."""
        return f"{self.exchange}.sites"

    def site_beacon(self, site: str) -> str:
        """The queue holding the latest heartbeat heard here from ``site`` (docs/sites.md)."""
        return f"{self.exchange}.site.{site}"

    def feed_queue(self, agent_id: str, feed: str) -> str:
        """Return the exclusive queue of one instance's feed (``consume_feed``)."""
        return f"{self.exchange}.feed.{agent_id}.{feed}"


def routing_key(envelope: Envelope) -> str:
    """Return the routing key an envelope is published with on the topic exchange."""
    if envelope.receiver_id == BROADCAST:
        return f"broadcast.{envelope.message_type}.{_broadcast_name(envelope)}"
    return f"agent.{envelope.receiver_id}.{envelope.message_type}"


def reply_routing_key(requester_id: str) -> str:
    """Return the routing key of a reply (response or error) to ``requester_id``."""
    return f"agent.{requester_id}.response"


class Destination(NamedTuple):
    """Where a message is published: exchange, routing key, and whether it must be routed."""

    exchange: str
    routing_key: str
    mandatory: bool


def reply_destination(reply: Envelope, reply_to: str | None, exchange: str) -> Destination:
    """Return where a reply goes: the request's AMQP ``reply_to``, else its sender's key.

    A ``reply_to`` names a queue on the default exchange. Direct reply-to on RabbitMQ 3.x
    returns a mandatory reply even when it was delivered, so replies to it go without
    the mandatory flag.
    """
    if reply_to:
        return Destination("", reply_to, not reply_to.startswith(DIRECT_REPLY_TO))
    return Destination(exchange, reply_routing_key(reply.receiver_id), True)


def _broadcast_name(envelope: Envelope) -> str:
    if isinstance(envelope, RequestEnvelope):
        return envelope.payload.action
    if isinstance(envelope, EventEnvelope):
        return envelope.payload.event_name
    return envelope.message_type


def topic_matches(pattern: str, key: str) -> bool:
    """Tell whether routing ``key`` matches binding ``pattern``.

    ``*`` matches exactly one word, ``#`` zero or more words.
    """
    # An empty string has no words at all (as RabbitMQ reads it), not one empty word.
    return _topic_matches_words(_words(pattern), _words(key))


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split(".")) if text else ()


@functools.lru_cache(maxsize=4096)
def _topic_matches_words(pattern: tuple[str, ...], key: tuple[str, ...]) -> bool:
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_topic_matches_words(rest, key[skip:]) for skip in range(len(key) + 1))
    if not key:
        return False
    if head in ("*", key[0]):
        return _topic_matches_words(rest, key[1:])
    return False
