"""A request's delivery, a reply publisher and a handler, fakes for the dispatcher's tests
of de-duplication and redelivery (``tests/unit``, ``tests/dedup``); ``serving_process`` is
one process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentbus import Settings
from agentbus._topology import routing_key
from agentbus.bus._dispatch import Dispatcher, dispatcher_for
from agentbus.bus._held import HeldAnswers
from agentbus.bus._pending import PendingRequests
from agentbus.bus._routes import Routes
from agentbus.bus._stats import BusStats
from agentbus.bus._stores._dedup import Reply, SharedDedupStore
from agentbus.envelopes import RequestEnvelope, RequestPayload, ResponseEnvelope, encode


@dataclass
class Delivery:
    """One delivery of a request, settled at most once."""

    request: RequestEnvelope
    redelivered: bool = False
    settled: list[str] = field(default_factory=list)
    reply_to: str | None = "client-queue"

    @property
    def body(self) -> bytes:
        return encode(self.request)

    @property
    def message_id(self) -> str:
        return self.request.message_id

    @property
    def correlation_id(self) -> str | None:
        return None

    @property
    def routing_key(self) -> str:
        return routing_key(self.request)

    @property
    def type(self) -> str:
        return "request"

    @property
    def headers(self) -> Mapping[str, object] | None:
        return None

    @property
    def user_id(self) -> str | None:
        return None

    async def ack(self) -> None:
        self.settled.append("ack")

    async def reject(self, *, requeue: bool = False) -> None:
        self.settled.append("requeue" if requeue else "reject")

    async def nack(self, *, requeue: bool = True) -> None:
        self.settled.append("requeue" if requeue else "reject")


class Replies:
    def __init__(self) -> None:
        self.sent: list[Reply] = []
        self.bodies: list[bytes | None] = []
        self.to: list[str | None] = []

    async def publish_reply(
        self, reply: Reply, reply_to: str | None, body: bytes | None = None
    ) -> None:
        self.sent.append(reply)
        self.bodies.append(body)
        self.to.append(reply_to)

    async def republish(self, message: object, headers: Mapping[str, int]) -> None:
        raise AssertionError("nothing is republished here")

    def results(self) -> list[object]:
        return [reply.result for reply in self.sent if isinstance(reply, ResponseEnvelope)]


class Work:
    """A handler: each run numbered; the first one waits for ``finish``."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.finish = asyncio.Event()

    async def __call__(self, request: RequestEnvelope) -> str:
        self.runs += 1
        run = self.runs
        if run == 1:
            self.started.set()
            await self.finish.wait()
        return f"run {run}"


@dataclass
class Process:
    dispatcher: Dispatcher
    replies: Replies
    stats: BusStats


def serving_process(
    agent_id: str, work: Work, shared: SharedDedupStore, *, service: str = "svc"
) -> Process:
    replies, stats, routes = Replies(), BusStats(), Routes()
    routes.service = service
    routes.serve(work, None)
    routes.broadcast_actions.add("work")
    dispatcher = dispatcher_for(
        agent_id=agent_id,
        settings=Settings(queue_type="quorum"),  # no classic delivery count in the way
        routes=routes,
        publisher=replies,
        pending=PendingRequests(),
        dedup=shared,
        stats=stats,
        held=HeldAnswers(),
    )
    return Process(dispatcher, replies, stats)


def request(receiver: str = "svc") -> RequestEnvelope:
    """A request of the action ``work`` to ``receiver``."""
    return RequestEnvelope(
        sender_id="client", receiver_id=receiver, payload=RequestPayload(action="work")
    )
