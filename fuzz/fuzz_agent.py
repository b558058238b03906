"""Fuzz an agent's request handling: fuzzed bytes delivered to the Dispatcher serving an Agent.

Each input is the body of one delivery. Its AMQP properties (``reply_to``,
``message_id``, ``correlation_id``, ``type``), the queue it came from (the instance's
or the shared service queue), whether the bus is draining, and whether the first
reply publish fails (``Unroutable`` or ``ConnectionLost``) are derived from a CRC of
the body. A fresh ``Dispatcher`` (fresh de-duplication window) serves each input
with ``Agent._handle`` of a small agent with typed skills, running on a
``MemoryBus``; replies go to a recording publisher that encodes them as the real
one does (size cap included).

Properties, for every input:

- no exception escapes the dispatcher, and it returns within 5 s;
- the delivery is settled exactly once, and the right way: an undecodable body is
  rejected without requeue; a request whose reply could not be sent for a transport
  reason, or turned away from a shared queue while draining, is requeued; all else acked;
- a reply is sent (or its send attempted) exactly when one is due and a reply address
  exists (``reply_to``, or a valid ``sender_id``); none for events, responses, errors;
- a reply answers the request (correlation id, receiver), encodes, and decodes back
  equal; its error code fits the request (expired deadline: ``timeout``; unknown
  action: ``unknown_action``; parameters the skill's model refuses:
  ``invalid_parameters``; parameters it accepts: never those two);
- a request delivered again (at-least-once) is answered again with the same reply and
  settled once, and no skill runs twice for one message id;
- handling takes less than ``--slow-ms`` (default here: 250 ms, best of three).

Run (see fuzz/README.md)::

    .venv/bin/python fuzz/fuzz_agent.py fuzz/work/agent fuzz/corpus/agent \\
        -max_total_time=600 -max_len=8192 -timeout=10 -rss_limit_mb=1024
"""

from __future__ import annotations

import asyncio
import sys
import time
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

import _fuzzkit
import orjson
from pydantic import BaseModel, Field, ValidationError

with _fuzzkit.instrumented():
    from agentbus import Agent, ConnectionLost, Unroutable, current_request, skill
    from agentbus.security import refusal
    from agentbus.bus._dedup import DedupWindow
    from agentbus.bus._dispatch import Dispatcher, _fallback_id
    from agentbus.bus._pending import PendingRequests
    from agentbus.bus._stats import BusStats
    from agentbus.envelopes import (
        EnvelopeError,
        ErrorEnvelope,
        EventEnvelope,
        RequestEnvelope,
        decode,
        encode,
        is_valid_id,
        utcnow,
    )
    from agentbus.testing import MemoryBroker, MemoryBus

TARGET = "agent"
MAX_SIZE = 4096  # the agent's size cap: large inputs and large results hit it
HANDLE_TIMEOUT = 5.0
NO_ANSWER = frozenset({"response", "error", "event"})
BUILTINS = frozenset({"ping", "describe", "cancel", "announce"})
REPLY_TOS = [None, "fuzz.replies", "amq.rabbitmq.reply-to.g2dkABNyYWJiaXRAbG9jYWxob3N0AAAAAAA"]
MESSAGE_IDS = [None, "amqp-mid-1", "bad id", "", "x" * 256]
CORRELATION_IDS = [None, "corr-1"]
TYPES = [None, "request", "response", "event", "error", "junk"]
FAILURES: list[type[Exception] | None] = [None] * 6 + [Unroutable, ConnectionLost]

EFFECTS: Counter[str] = Counter()


def effect() -> None:
    """A skill's side effect: counted per request message id (must stay at most 1)."""
    EFFECTS[current_request().message_id] += 1


class Item(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=64)]
    quantity: Annotated[int, Field(ge=0, le=1000)] = 1
    tags: Annotated[list[str], Field(max_length=8)] = []
    due: datetime | None = None
    kind: Literal["book", "tool"] = "book"


class FuzzAgent(Agent):
    name = "fuzz"
    description = "typed skills to fuzz parameter binding"

    @skill
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        effect()
        return a + b

    @skill
    async def repeat(self, text: str, times: Annotated[int, Field(ge=0, le=100)] = 1) -> str:
        """Repeat a text: large results are over the size cap."""
        effect()
        return text * times

    @skill
    async def mean(self, values: list[float]) -> float:
        """The mean: raises ZeroDivisionError on no values."""
        effect()
        return sum(values) / len(values)

    @skill
    async def store(self, item: Item, replace: bool = False) -> Item:
        """Store an item (a nested model)."""
        effect()
        return item.model_copy(update={"quantity": item.quantity + int(replace)})

    @skill
    async def shift(self, at: datetime, days: float = 0.0) -> datetime:
        """A time moved by some days: OverflowError out of range."""
        effect()
        return at + timedelta(days=days)

    @skill
    async def lookup(self, key: str, table: dict[str, int] | None = None) -> int:
        """A value from a table: KeyError when missing."""
        effect()
        return (table or {})[key]


@dataclass(slots=True)
class Delivery:
    """A fake IncomingMessage that records how it is settled."""

    body: bytes
    message_id: str | None
    correlation_id: str | None
    reply_to: str | None
    routing_key: str | None
    type: str | None
    settles: list[tuple[str, bool]] = field(default_factory=list)
    headers: dict[str, Any] | None = None
    user_id: str | None = None
    redelivered: bool = False

    async def ack(self) -> None:
        self.settles.append(("ack", False))

    async def reject(self, *, requeue: bool = False) -> None:
        self.settles.append(("reject", requeue))

    async def nack(self, *, requeue: bool = True) -> None:
        self.settles.append(("nack", requeue))


class Replies:
    """A ReplyPublisher that encodes as the real one does, records, and can fail once."""

    def __init__(self, fail_first: type[Exception] | None) -> None:
        self.fail_first = fail_first
        self.sent: list[tuple[Any, str | None, bytes]] = []
        self.failed = 0
        self.unencodable = 0

    async def publish_reply(
        self, reply: Any, reply_to: str | None, body: bytes | None = None
    ) -> None:
        if body is None:  # the dispatcher's own replies come encoded; error replies do not
            try:
                body = encode(reply, max_size=MAX_SIZE)  # PayloadTooLarge, as the real one
            except EnvelopeError:
                self.unencodable += 1
                raise
        await asyncio.sleep(0)
        if self.fail_first is not None:
            failure, self.fail_first = self.fail_first, None
            self.failed += 1
            raise failure("injected by the fuzzer")
        self.sent.append((reply, reply_to, body))

    @property
    def attempts(self) -> int:
        return len(self.sent) + self.failed


@dataclass(slots=True)
class Case:
    """How one input is delivered, derived from the body's CRC."""

    reply_to: str | None
    message_id: str | None
    correlation_id: str | None
    type: str | None
    shared: bool
    accepting: bool
    failure: type[Exception] | None

    @classmethod
    def of(cls, data: bytes) -> Case:
        crc = zlib.crc32(data)

        def pick(options: list[Any]) -> Any:
            nonlocal crc
            crc, index = divmod(crc, len(options))
            return options[index]

        return cls(
            reply_to=pick(REPLY_TOS),
            message_id=pick(MESSAGE_IDS),
            correlation_id=pick(CORRELATION_IDS),
            type=pick(TYPES),
            shared=pick([True, False]),
            accepting=pick([True, True, True, False]),
            failure=pick(FAILURES),
        )

    def delivery(self, data: bytes) -> Delivery:
        key = "agent.fuzz.request" if self.shared else "agent.fuzz-1.request"
        return Delivery(data, self.message_id, self.correlation_id, self.reply_to, key, self.type)


_fuzzkit.quiet()
warnings.simplefilter("ignore")  # pydantic's serializer warnings on odd skill results
args, libfuzzer_args = _fuzzkit.parse_args(__doc__ or "", TARGET, slow_ms=250.0)
findings = _fuzzkit.Findings(TARGET, args.findings, stop=args.stop)
loop = asyncio.new_event_loop()
broker = MemoryBroker()
# The agent runs on an in-memory bus (its heartbeats and ``announce`` use it); each
# input gets a Dispatcher of its own, serving the agent's request handler.
agent = FuzzAgent(
    agent_id="fuzz-1", heartbeat_interval=3600, bus=MemoryBus(broker, agent_id="fuzz-1")
)


def violation(signature: str, detail: str = "") -> _fuzzkit.PropertyViolation:
    return _fuzzkit.PropertyViolation(signature, detail)


async def deliver(dispatcher: Dispatcher, delivery: Delivery, shared: bool) -> None:
    handle = dispatcher.on_service_message if shared else dispatcher.on_message
    try:
        async with asyncio.timeout(HANDLE_TIMEOUT):
            await handle(delivery)
    except TimeoutError:
        raise violation("dispatcher did not return within 5 s") from None


def new_dispatcher(case: Case) -> tuple[Dispatcher, Replies, BusStats]:
    replies = Replies(case.failure)
    stats = BusStats()
    dispatcher = Dispatcher(
        agent_id=agent.id,
        publisher=replies,
        pending=PendingRequests(),
        dedup=DedupWindow(600.0, 1000),
        stats=stats,
        max_size=MAX_SIZE,
    )
    dispatcher.request_handler = agent._handle
    dispatcher.service = agent.name
    dispatcher.accepting = case.accepting
    return dispatcher, replies, stats


async def check_async(data: bytes) -> None:
    case = Case.of(data)
    EFFECTS.clear()
    started = time.perf_counter()
    dispatcher, replies, stats = new_dispatcher(case)
    first = case.delivery(data)
    await deliver(dispatcher, first, case.shared)
    seconds = time.perf_counter() - started
    if seconds > args.slow_ms / 1000:
        best = seconds
        for _ in range(2):
            again, _, _ = new_dispatcher(case)
            started = time.perf_counter()
            await deliver(again, case.delivery(data), case.shared)
            best = min(best, time.perf_counter() - started)
        if best > args.slow_ms / 1000:
            raise violation("slow handling", f"{best * 1000:.1f} ms for {len(data)} bytes")
        EFFECTS.clear()
        dispatcher, replies, stats = new_dispatcher(case)
        first = case.delivery(data)
        await deliver(dispatcher, first, case.shared)

    if len(first.settles) != 1:
        raise violation(
            f"settled {min(len(first.settles), 2)} times", _fuzzkit.safe_repr(first.settles)
        )
    # Decoded as the dispatcher does: the AMQP ids stand in for a missing message_id.
    fallback = _fallback_id(first)
    try:
        envelope = decode(data, max_size=MAX_SIZE, message_id=fallback)
    except EnvelopeError as exc:
        check_refused(case, first, replies, exc)
        return
    # Without any id (body nor AMQP properties), each delivery gets a fresh random one.
    has_id = fallback is not None or "message_id" in orjson.loads(data)
    admission = refusal(
        first,
        envelope,
        agent_id=agent.id,
        service=agent.name,
        shared=case.shared,
        verify_sender=False,
    )
    if admission is not None:
        # Addressed elsewhere than the delivery's routing key: refused, dead-lettered, no effect.
        if first.settles != [("reject", False)] or EFFECTS or stats.refused != 1:
            raise violation(f"refused ({admission}) but ran or not dead-lettered once")
        return
    if isinstance(envelope, RequestEnvelope):
        check_request(case, envelope, first, replies, stats, has_id)
        if case.accepting:
            await check_redelivery(case, data, dispatcher, replies, has_id)
    else:
        if first.settles != [("ack", False)]:
            raise violation(f"{envelope.message_type} not acked", _fuzzkit.safe_repr(first.settles))
        if replies.attempts:
            raise violation(f"{envelope.message_type} answered", _fuzzkit.safe_repr(replies.sent))
        if not isinstance(envelope, EventEnvelope) and stats.unknown_replies != 1:
            raise violation("reply to nobody not counted as unknown", _fuzzkit.safe_repr(stats))


def check_refused(case: Case, delivery: Delivery, replies: Replies, exc: EnvelopeError) -> None:
    if delivery.settles != [("reject", False)]:
        raise violation(
            "undecodable delivery not dead-lettered", _fuzzkit.safe_repr(delivery.settles)
        )
    raw = exc.raw or {}
    message_type = raw.get("message_type", case.type)
    answerable = not (isinstance(message_type, str) and message_type in NO_ANSWER)
    address = bool(case.reply_to) or is_valid_id(raw.get("sender_id"))
    expected = int(answerable and address)
    if replies.attempts < expected and replies.unencodable:
        raise violation(
            "undecodable: the error reply is over the size cap, so none is sent",
            f"{len(delivery.body)}-byte input, {MAX_SIZE}-byte cap",
        )
    if replies.attempts != expected:
        raise violation(
            f"undecodable: {replies.attempts} replies where {expected} due",
            _fuzzkit.safe_repr(replies.sent),
        )
    for reply, reply_to, body in replies.sent:
        if not isinstance(reply, ErrorEnvelope) or reply.payload.code != exc.code:
            raise violation("undecodable: reply is not the decode error", _fuzzkit.safe_repr(reply))
        check_reply_wire(reply, body)
        if reply_to != case.reply_to:
            raise violation(
                "reply not sent to reply_to",
                f"{_fuzzkit.safe_repr(reply_to)} != {_fuzzkit.safe_repr(case.reply_to)}",
            )


def check_request(
    case: Case,
    request: RequestEnvelope,
    first: Delivery,
    replies: Replies,
    stats: BusStats,
    has_id: bool,
) -> None:
    if not case.accepting:
        if case.shared:
            if first.settles != [("nack", True)] or replies.attempts:
                raise violation(
                    "draining: shared request not requeued", _fuzzkit.safe_repr(first.settles)
                )
            return
        expected_settle = [("ack", False)]
    elif case.failure is ConnectionLost:
        expected_settle = [("nack", True)]
    else:
        expected_settle = [("ack", False)]
    if first.settles != expected_settle:
        raise violation(
            f"request settled {first.settles} not {expected_settle}", f"failure={case.failure}"
        )
    if replies.attempts != 1:
        raise violation(f"request: {replies.attempts} replies", _fuzzkit.safe_repr(replies.sent))
    if case.failure is not None:
        if case.failure is Unroutable and stats.replies_dropped != 1:
            raise violation("unroutable reply not counted as dropped", _fuzzkit.safe_repr(stats))
    else:
        reply, reply_to, body = replies.sent[0]
        check_reply(request, reply, reply_to, body, case, has_id)
    if any(count > 1 for count in EFFECTS.values()):
        raise violation("a skill ran twice for one request", _fuzzkit.safe_repr(EFFECTS))


def check_reply(
    request: RequestEnvelope,
    reply: Any,
    reply_to: str | None,
    body: bytes,
    case: Case,
    has_id: bool,
) -> None:
    correlated = reply.correlation_id == request.message_id or not has_id
    if not correlated or reply.receiver_id != request.sender_id:
        raise violation("reply does not answer the request", _fuzzkit.safe_repr(reply))
    if reply_to != case.reply_to:
        raise violation(
            "reply not sent to reply_to",
            f"{_fuzzkit.safe_repr(reply_to)} != {_fuzzkit.safe_repr(case.reply_to)}",
        )
    check_reply_wire(reply, body)
    code = reply.payload.code if isinstance(reply, ErrorEnvelope) else None
    if not case.accepting:
        if code != "agent_unavailable":
            raise violation(
                "draining: request not refused as agent_unavailable", _fuzzkit.safe_repr(reply)
            )
        return
    action = request.payload.action
    deadline = request.metadata.deadline
    if deadline is not None and deadline <= utcnow():
        expected: set[str | None] = {"timeout"}
    elif action in BUILTINS:
        expected = {None}
    elif action not in FuzzAgent.skills:
        expected = {"unknown_action"}
    else:
        try:
            FuzzAgent.skills[action].parameters_model.model_validate(request.payload.parameters)
        except ValidationError:
            expected = {"invalid_parameters"}
        else:
            expected = {None, "processing_failed", "payload_too_large"}
    if code == "invalid_envelope" and reply.payload.message.startswith("cannot encode"):
        raise violation(
            "unencodable skill result answered with code invalid_envelope",
            _fuzzkit.safe_repr(reply),
        )
    if code not in expected:
        raise violation(
            f"action {action if action in FuzzAgent.skills or action in BUILTINS else '?'}: "
            f"code {code} not in {sorted(map(str, expected))}",
            _fuzzkit.safe_repr(reply),
        )


def check_reply_wire(reply: Any, body: bytes) -> None:
    back = decode(body, max_size=None)
    if back != reply:
        raise violation(
            f"{reply.message_type} reply changes on the wire",
            f"sent: {_fuzzkit.safe_repr(reply)}\nread: {_fuzzkit.safe_repr(back)}",
        )


async def check_redelivery(
    case: Case, data: bytes, dispatcher: Dispatcher, replies: Replies, has_id: bool
) -> None:
    """The same request again on the same dispatcher: answered again, settled once, no effect."""
    effects = Counter(EFFECTS)
    sent = list(replies.sent)
    again = case.delivery(data)
    await deliver(dispatcher, again, case.shared)
    if again.settles != [("ack", False)]:
        raise violation("redelivered request not acked", _fuzzkit.safe_repr(again.settles))
    if not has_id:
        # No id anywhere: each delivery gets a fresh one, so a redelivery is a new request
        # and may run again (docs/wire.md, "Duplicates"). Nothing more to check.
        return
    if effects != EFFECTS:
        raise violation("redelivered request ran the skill again", _fuzzkit.safe_repr(EFFECTS))
    if len(replies.sent) != len(sent) + 1:
        raise violation("redelivered request not answered again", repr(replies.sent[len(sent) :]))
    repeat = replies.sent[-1][0]
    # Equal, not the same object: the window keeps replies encoded and decodes them again.
    if sent and repeat != sent[0][0]:
        raise violation("redelivered request answered differently", _fuzzkit.safe_repr(repeat))


def check(data: bytes) -> None:
    loop.run_until_complete(check_async(data))


def test_one_input(data: bytes) -> None:
    _fuzzkit.run_checked(findings, data, check)


KEYS = [
    "protocol_version",
    "message_id",
    "timestamp",
    "sender_id",
    "receiver_id",
    "message_type",
    "payload",
    "metadata",
    "action",
    "parameters",
    "correlation_id",
    "deadline",
    "trace",
    "notify_start",
    "a",
    "b",
    "text",
    "times",
    "values",
    "item",
    "name",
    "quantity",
    "tags",
    "due",
    "kind",
    "replace",
    "at",
    "days",
    "key",
    "table",
]
ACTIONS = [*FuzzAgent.skills, *BUILTINS, "book", "tool", "missing", "2030-01-01T00:00:00Z"]
MUTATOR = _fuzzkit.JsonMutator(KEYS, ACTIONS)

if __name__ == "__main__":
    loop.run_until_complete(agent.start())
    _fuzzkit.main(args, libfuzzer_args, findings, test_one_input, MUTATOR)
    sys.exit(0)
