"""A request redelivered while its first run still ends here (a reconnect's race).

When a channel closes, RabbitMQ requeues what it held, and a reconnected consumer can get
the copy before the run on the dead channel has finished unwinding (a durable leader
handing its plan over takes a moment). The copy waits for that run: its reply answers the
copy, or, if the run was abandoned, the copy serves the request. Before, the copy was
acked as "running already" and the request was lost with the abandoned run.
"""

from __future__ import annotations

import asyncio
from unittest.mock import patch

from agentbus import Settings
from agentbus.bus._dispatch import Dispatcher, dispatcher_for
from agentbus.bus._held import HeldAnswers
from agentbus.bus._pending import PendingRequests
from agentbus.bus._routes import Routes
from agentbus.bus._stats import BusStats
from agentbus.bus._stores._dedup import DedupWindow
from agentbus.envelopes import (
    ErrorEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    decode,
    encode,
)
from support.serving_fakes import Delivery, Replies, request

Reply = ResponseEnvelope | ErrorEnvelope


class _Work:
    """A handler whose first run blocks and, cancelled, takes a while to unwind."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.unwinding = asyncio.Event()
        self.unwound = asyncio.Event()

    async def __call__(self, request: RequestEnvelope) -> str:
        self.runs += 1
        if self.runs > 1:
            return f"run {self.runs}"
        self.started.set()
        try:
            await self.finish.wait()
        except asyncio.CancelledError:
            self.unwinding.set()
            await self.unwound.wait()  # a hand-over still writing its journal
            raise
        return "run 1"


def _dispatcher(
    work: _Work, dedup: DedupWindow | None = None, max_size: int = 1 << 20
) -> tuple[Dispatcher, Replies, BusStats]:
    replies, stats = Replies(), BusStats()
    routes = Routes()
    routes.service = "svc"
    routes.serve(work, None)
    dispatcher = dispatcher_for(
        agent_id="svc-1",
        # quorum: no delivery count of the bus's own, so a redelivered copy is served
        settings=Settings(max_message_size=max_size, queue_type="quorum"),
        routes=routes,
        publisher=replies,
        pending=PendingRequests(),
        dedup=dedup if dedup is not None else DedupWindow(60.0, 100),
        stats=stats,
        held=HeldAnswers(),
    )
    return dispatcher, replies, stats


async def test_a_copy_of_an_abandoned_run_serves_therequest() -> None:
    work = _Work()
    dispatcher, replies, _ = _dispatcher(work)
    first = Delivery(request())
    running = asyncio.create_task(dispatcher.on_service_message(first))
    await work.started.wait()
    running.cancel()  # the channel closed: aiormq cancels the delivery's task
    await work.unwinding.wait()
    copy = Delivery(first.request, redelivered=True)
    serving = asyncio.create_task(dispatcher.on_service_message(copy))
    await asyncio.sleep(0)  # one turn of the loop: the copy reaches the dispatcher
    waited = not serving.done()
    work.unwound.set()
    await asyncio.gather(running, return_exceptions=True)
    await serving

    assert waited, "the copy was settled while the run was still unwinding"

    assert work.runs == 2, "the copy did not serve the abandoned request"
    assert [reply.result for reply in replies.sent if isinstance(reply, ResponseEnvelope)] == [
        "run 2"
    ]
    assert copy.settled == ["ack"]
    assert first.settled == ["requeue"]


async def test_a_copy_of_a_run_that_finishes_is_answered_with_its_reply() -> None:
    work = _Work()
    dispatcher, replies, stats = _dispatcher(work)
    first = Delivery(request())
    running = asyncio.create_task(dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request, redelivered=True)
    serving = asyncio.create_task(dispatcher.on_service_message(copy))
    await asyncio.sleep(0)
    waited = not serving.done()
    work.finish.set()
    await asyncio.gather(running, serving)

    assert waited, "the copy did not wait for the run"

    assert work.runs == 1
    assert [reply.result for reply in replies.sent if isinstance(reply, ResponseEnvelope)] == [
        "run 1",
        "run 1",
    ]
    assert stats.duplicates == 1
    assert copy.settled == ["ack"]


async def test_a_copy_that_is_not_a_redelivery_does_not_wait() -> None:
    work = _Work()
    dispatcher, replies, stats = _dispatcher(work)
    first = Delivery(request())
    running = asyncio.create_task(dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request)  # published twice: the first run answers
    await dispatcher.on_service_message(copy)
    work.finish.set()
    await running

    assert work.runs == 1
    assert stats.duplicates == 1
    assert copy.settled == ["ack"]
    assert len(replies.sent) == 1


async def test_a_reply_is_encoded_once_for_the_store_and_the_publisher() -> None:
    """The bytes the store keeps for a duplicate are the bytes sent: one encode per reply."""
    work = _Work()
    work.finish.set()
    dispatcher, replies, stats = _dispatcher(work)
    first = Delivery(request())
    with (
        patch("agentbus.bus._by_reference.encode", wraps=encode) as by_dispatcher,
        patch("agentbus.bus._stores._dedup.encode", wraps=encode) as by_store,
    ):
        await dispatcher.on_service_message(first)
    await dispatcher.on_service_message(Delivery(first.request))  # published twice

    assert (by_dispatcher.call_count, by_store.call_count) == (1, 0)
    body = replies.bodies[0]
    assert body is not None
    assert decode(body) == replies.sent[0]
    assert replies.sent[1] == replies.sent[0], "the duplicate is answered from the store"
    assert stats.duplicates == 1


class _OldStore(DedupWindow):
    """A store written before ``complete`` took the encoded reply."""

    def complete(  # type: ignore[override]
        self, message_id: str, reply: Reply | None, reply_to: str | None
    ) -> None:
        super().complete(message_id, reply, reply_to)


async def test_a_store_without_the_body_argument_still_serves_once() -> None:
    """A de-duplication store from before ``body`` is called without it, and still works."""
    work = _Work()
    work.finish.set()
    dispatcher, replies, stats = _dispatcher(work, dedup=_OldStore(60.0, 100))
    first = Delivery(request())
    await dispatcher.on_service_message(first)
    copy = Delivery(first.request)
    await dispatcher.on_service_message(copy)

    assert (first.settled, copy.settled) == (["ack"], ["ack"])
    assert work.runs == 1
    assert replies.sent[1] == replies.sent[0]
    assert stats.duplicates == 1


async def test_a_reply_that_even_as_an_error_is_over_the_cap_is_remembered() -> None:
    """With a cap that the request fits but neither its answer nor an error does, the
    request is left for redelivery, and the redelivered copy finds the error remembered
    instead of running the work again."""
    work = _Work()
    work.finish.set()
    first = Delivery(request())
    # A response or an error carries a correlation id: neither fits a cap the request fits.
    dispatcher, replies, stats = _dispatcher(work, max_size=len(first.body) + 8)
    await dispatcher.on_service_message(first)
    copy = Delivery(first.request, redelivered=True)
    await dispatcher.on_service_message(copy)

    assert first.settled == ["requeue"]
    assert copy.settled == ["ack"]
    assert work.runs == 1
    assert stats.duplicates == 1
    # The copy is answered with the remembered error (a real publisher refuses it as too
    # large and counts it dropped; this one takes anything).
    assert [reply.payload.code for reply in replies.sent if isinstance(reply, ErrorEnvelope)] == [
        "payload_too_large"
    ]


async def test_a_request_asked_again_by_another_sender_is_answered_to_that_sender() -> None:
    """A leader taking a plan over asks again under the same id, and a copy that crossed
    from another site has no reply_to: the answer from memory goes to whoever asks now."""
    work = _Work()
    work.finish.set()
    dispatcher, replies, stats = _dispatcher(work)
    first = Delivery(request().model_copy(update={"sender_id": "leader-1"}))
    await dispatcher.on_service_message(first)
    again = first.request.model_copy(update={"sender_id": "leader-2"})
    copy = Delivery(again, reply_to=None)
    await dispatcher.on_service_message(copy)

    assert work.runs == 1
    assert stats.duplicates == 1
    assert [
        (reply.receiver_id, to) for reply, to in zip(replies.sent, replies.to, strict=True)
    ] == [
        ("leader-1", "client-queue"),
        ("leader-2", None),
    ]
    assert replies.sent[0].correlation_id == replies.sent[1].correlation_id == first.message_id
