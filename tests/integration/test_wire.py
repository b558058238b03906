"""The wire contract seen by other clients: raw aio-pika bytes and pika, another library."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import aio_pika
import orjson
import pika
import pytest
from helpers import BusFactory

from agentbus import RequestEnvelope
from agentbus.bus import Topology
from agentbus.envelopes import DEFAULT_MAX_SIZE
from support.required import missing


async def counting_echo_server(make_bus: BusFactory, service: str, **settings: Any) -> list[str]:
    """Serve ``service`` with an echo handler; return the list of message ids it ran."""
    runs: list[str] = []

    async def handler(request: RequestEnvelope) -> dict[str, Any]:
        runs.append(request.message_id)
        parameters = request.payload.parameters
        if "nest" in parameters:  # a result deeper than the parameters: nest N lists deep
            nested: Any = []
            for _ in range(parameters["nest"]):
                nested = [nested]
            return {"echo": nested}
        return {"echo": parameters}

    server = await make_bus(**settings)
    await server.serve(handler, service=service)
    return runs


async def reply_queue(channel: aio_pika.abc.AbstractChannel) -> aio_pika.abc.AbstractQueue:
    return await channel.declare_queue(exclusive=True)


async def next_bodies(
    queue: aio_pika.abc.AbstractQueue, count: int = 1, timeout: float = 10
) -> list[dict[str, Any]]:
    """Consume ``count`` message bodies from ``queue``."""
    bodies: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout), queue.iterator() as messages:
        async for message in messages:
            await message.ack()
            bodies.append(orjson.loads(message.body))
            if len(bodies) == count:
                break
    return bodies


async def get_one(
    queue: aio_pika.abc.AbstractQueue, timeout: float = 10
) -> aio_pika.abc.AbstractIncomingMessage:
    """Get one message from ``queue``, polling until it arrives."""
    async with asyncio.timeout(timeout):
        while True:
            message = await queue.get(fail=False)
            if message is not None:
                return message
            await asyncio.sleep(0.02)


BAD_BODIES = [
    pytest.param(b"{not json", "invalid_envelope", id="malformed-json"),
    pytest.param(b"\xff\xfe\x00garbage", "invalid_envelope", id="invalid-utf8"),
    pytest.param(
        orjson.dumps(
            {
                "protocol_version": "1.0",
                "sender_id": "raw",
                "receiver_id": "svc",
                "message_type": "request",
                "payload": {"action": 42},
            }
        ),
        "invalid_envelope",
        id="wrong-types",
    ),
    pytest.param(
        orjson.dumps(
            {
                "protocol_version": "2.0",
                "sender_id": "raw",
                "receiver_id": "svc",
                "message_type": "request",
                "payload": {"action": "x"},
            }
        ),
        "unsupported_version",
        id="wrong-version",
    ),
    pytest.param(b'{"pad": "' + b"x" * 5000 + b'"}', "payload_too_large", id="too-large"),
]


@pytest.mark.parametrize(("body", "code"), BAD_BODIES)
async def test_bad_bytes_get_an_error_reply_and_are_dead_lettered_once(
    make_bus: BusFactory,
    raw_channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
    body: bytes,
    code: str,
) -> None:
    """Bytes that are no envelope get an error envelope, land in the DLQ once, serving goes on."""
    await refused_once(make_bus, raw_channel, exchange_name, body, code, max_message_size=4096)


def _request_body(parameters: bytes, message_id: str | None = None) -> bytes:
    """A request envelope to ``svc`` whose parameters are the raw JSON ``parameters``."""
    head = b'{"protocol_version": "1.0", "sender_id": "raw", "receiver_id": "svc", '
    if message_id is not None:
        head += b'"message_id": "' + message_id.encode() + b'", '
    kind = b'"message_type": "request", "payload": {"action": "echo", "parameters": '
    return head + kind + parameters + b"}}"


HUGE = 20 * 1024 * 1024  # RabbitMQ 3.10 takes up to 128 MiB (max_message_size 134217728)
DEEP = 100_000  # nested arrays; orjson refuses JSON deeper than 1,024 levels


def _nested(depth: int) -> bytes:
    return _request_body(b'{"deep": ' + b"[" * depth + b"]" * depth + b"}")


def _huge() -> bytes:
    return _request_body(b'{"pad": "' + b"x" * HUGE + b'"}')


def _deep() -> bytes:
    return _nested(DEEP)


@pytest.mark.parametrize(
    ("build", "code", "says"),
    [
        pytest.param(_huge, "payload_too_large", "over the", id="huge-20MB"),
        pytest.param(_deep, "invalid_envelope", "depth limit exceeded", id="deep-100000"),
        # orjson reads this, but could not write it back: refused on reading.
        pytest.param(
            lambda: _nested(500), "invalid_envelope", "nested deeper than 254", id="deep-500"
        ),
    ],
)
async def test_huge_or_deep_payloads_get_an_error_reply_and_are_dead_lettered_once(
    make_bus: BusFactory,
    raw_channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
    build: Callable[[], bytes],
    code: str,
    says: str,
) -> None:
    """A 20 MB request, or one nested too deep to read or write back: refused once, clearly."""
    body = build()
    error = await refused_once(make_bus, raw_channel, exchange_name, body, code)
    assert says in error["payload"]["message"]
    if code == "payload_too_large":
        assert error["payload"]["details"] == {"size": len(body), "max_size": DEFAULT_MAX_SIZE}


async def test_request_whose_echo_cannot_be_encoded_gets_a_clear_error_reply(
    make_bus: BusFactory, raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> None:
    """A valid request whose result is nested 300 deep: it cannot be encoded (254 levels)."""
    runs = await counting_echo_server(make_bus, "svc")
    client = await make_bus()
    replies = await reply_queue(raw_channel)
    exchange = await raw_channel.get_exchange(exchange_name)
    message_id = f"deep-echo-{uuid.uuid4()}"
    body = _request_body(b'{"nest": 300}', message_id)

    await exchange.publish(
        aio_pika.Message(body, reply_to=replies.name), routing_key="agent.svc.request"
    )
    [error] = await next_bodies(replies)

    assert error["message_type"] == "error"
    assert error["metadata"]["correlation_id"] == message_id
    assert error["payload"]["code"] == "processing_failed"
    assert "the result cannot be sent" in error["payload"]["message"]
    assert "Recursion limit" in error["payload"]["message"]
    assert runs == [message_id], "the handler ran once"
    # The request itself was valid: answered and acked, not dead-lettered.
    dead = await raw_channel.declare_queue(Topology(exchange_name).dead_letter_queue, passive=True)
    assert await dead.get(fail=False) is None
    reply = await client.request("svc", "after", {"n": 2}, timeout=10)
    assert reply.result == {"echo": {"n": 2}}


async def refused_once(
    make_bus: BusFactory,
    raw_channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
    body: bytes,
    code: str,
    **settings: Any,
) -> dict[str, Any]:
    """Publish ``body`` raw to ``svc``: check the error reply, one dead letter, serving goes on.

    Returns the error envelope received.
    """
    runs = await counting_echo_server(make_bus, "svc", **settings)
    client = await make_bus()
    replies = await reply_queue(raw_channel)
    exchange = await raw_channel.get_exchange(exchange_name)

    await exchange.publish(
        aio_pika.Message(body, reply_to=replies.name, message_id="raw-1"),
        routing_key="agent.svc.request",
    )
    [error] = await next_bodies(replies)

    assert error["message_type"] == "error"
    assert error["payload"]["code"] == code
    assert error["metadata"]["correlation_id"] == "raw-1"
    dead = await raw_channel.declare_queue(Topology(exchange_name).dead_letter_queue, passive=True)
    letter = await get_one(dead)
    assert letter.body == body
    deaths = letter.headers["x-death"]
    assert isinstance(deaths, list)
    assert deaths[0]["count"] == 1  # type: ignore[index]
    assert deaths[0]["reason"] == "rejected"  # type: ignore[index]
    await letter.ack()
    assert await dead.get(fail=False) is None
    # The consumer is still serving.
    reply = await client.request("svc", "after", {"n": 1}, timeout=10)
    assert reply.result == {"echo": {"n": 1}}
    assert len(runs) == 1
    return error


async def test_bad_bytes_without_a_reply_address_are_only_dead_lettered(
    make_bus: BusFactory, raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> None:
    """Garbage with no reply_to and no sender is dead-lettered and counted, nothing answered."""
    server_runs = await counting_echo_server(make_bus, "svc")
    exchange = await raw_channel.get_exchange(exchange_name)
    dead = await raw_channel.declare_queue(Topology(exchange_name).dead_letter_queue, passive=True)

    await exchange.publish(aio_pika.Message(b"[1, 2, 3]"), routing_key="agent.svc.request")
    letter = await get_one(dead)

    assert letter.body == b"[1, 2, 3]"
    assert server_runs == []


async def test_duplicate_request_runs_once_and_is_answered_twice(
    make_bus: BusFactory, raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> None:
    """A request redelivered after it was served runs once; the copy is answered from memory."""
    runs = await counting_echo_server(make_bus, "svc")
    replies = await reply_queue(raw_channel)
    exchange = await raw_channel.get_exchange(exchange_name)
    request = orjson.dumps(
        {
            "protocol_version": "1.0",
            "message_id": f"dup-{uuid.uuid4()}",
            "sender_id": "raw-client",
            "receiver_id": "svc",
            "message_type": "request",
            "payload": {"action": "charge", "parameters": {"cents": 100}},
        }
    )

    bodies = []
    for _ in range(2):
        await exchange.publish(
            aio_pika.Message(request, reply_to=replies.name), routing_key="agent.svc.request"
        )
        bodies += await next_bodies(replies)

    assert len(runs) == 1
    assert bodies[0] == bodies[1]
    assert bodies[0]["payload"]["result"] == {"echo": {"cents": 100}}


async def test_concurrent_duplicates_run_once(
    make_bus: BusFactory, raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> None:
    """Copies of one request delivered together run the handler once and are answered."""
    runs = await counting_echo_server(make_bus, "svc")
    replies = await reply_queue(raw_channel)
    exchange = await raw_channel.get_exchange(exchange_name)
    message_id = f"dup-{uuid.uuid4()}"
    request = orjson.dumps(
        {
            "protocol_version": "1.0",
            "message_id": message_id,
            "sender_id": "raw-client",
            "receiver_id": "svc",
            "message_type": "request",
            "payload": {"action": "charge", "parameters": {"cents": 5}},
        }
    )

    for _ in range(5):
        await exchange.publish(
            aio_pika.Message(request, reply_to=replies.name), routing_key="agent.svc.request"
        )
    [reply] = await next_bodies(replies)

    assert reply["metadata"]["correlation_id"] == message_id
    assert runs == [message_id]


def pika_request(
    url: str, exchange: str, body: bytes, *, direct_reply_to: bool
) -> tuple[dict[str, Any], pika.BasicProperties]:
    """Publish ``body`` as a request with pika and wait for the reply (blocking)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        if direct_reply_to:
            reply_to = "amq.rabbitmq.reply-to"
        else:
            reply_to = channel.queue_declare("", exclusive=True).method.queue
        got: list[tuple[bytes, pika.BasicProperties]] = []

        def on_reply(ch: Any, method: Any, props: pika.BasicProperties, data: bytes) -> None:
            got.append((data, props))

        channel.basic_consume(reply_to, on_reply, auto_ack=True)
        channel.basic_publish(
            exchange,
            "agent.svc.request",
            body,
            pika.BasicProperties(
                content_type="application/json", reply_to=reply_to, correlation_id="pika-corr"
            ),
        )
        deadline = 100
        while not got and deadline:
            connection.process_data_events(time_limit=0.1)
            deadline -= 1
        assert got, "no reply within 10 s"
        data, props = got[0]
        return orjson.loads(data), props
    finally:
        connection.close()


@pytest.mark.parametrize("direct_reply_to", [False, True], ids=["own-queue", "direct-reply-to"])
async def test_request_from_pika_gets_a_valid_response(
    make_bus: BusFactory, broker_url: str, exchange_name: str, direct_reply_to: bool
) -> None:
    """A request from pika, with its own reply_to and no message_id/timestamp, is answered."""
    await counting_echo_server(make_bus, "svc")
    body = orjson.dumps(
        {
            "protocol_version": "1.0",
            "sender_id": "pika-client",
            "receiver_id": "svc",
            "message_type": "request",
            "payload": {"action": "hello", "parameters": {"from": "pika"}},
            "x_vendor": "kept",
        }
    )

    reply, props = await asyncio.to_thread(
        pika_request, broker_url, exchange_name, body, direct_reply_to=direct_reply_to
    )

    assert reply["message_type"] == "response"
    assert reply["payload"] == {
        "status": "success",
        "result": {"echo": {"from": "pika"}},
        "error": None,
    }
    assert reply["receiver_id"] == "pika-client"
    # No message_id at all: the AMQP correlation_id (classic RPC style) stands in for it.
    assert reply["metadata"]["correlation_id"] == "pika-corr"
    assert props.correlation_id == "pika-corr"
    assert props.content_type == "application/json"
    assert props.type == "response"
    assert props.message_id == reply["message_id"]


def _amqp_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(
            f"{name} (Debian package amqp-tools) is needed; ./scripts/ensure-broker installs it"
        )
    return path


async def test_request_from_amqp_tools_shell_client_gets_a_response(
    make_bus: BusFactory, broker_url: str, exchange_name: str
) -> None:
    """The docs' shell example works: amqp-publish with -t, amqp-get reads the response."""
    await counting_echo_server(make_bus, "svc")
    queue = f"{exchange_name}-shell-replies"
    url = broker_url.rstrip("/")
    body = orjson.dumps(
        {
            "protocol_version": "1.0",
            "sender_id": "shell",
            "receiver_id": "svc",
            "message_type": "request",
            "payload": {"action": "hello", "parameters": {"from": "shell"}},
        }
    )

    def run(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
        return done.stdout

    run(_amqp_tool("amqp-declare-queue"), "-u", url, "-q", queue)
    try:
        run(
            _amqp_tool("amqp-publish"), "-u", url, "-e", exchange_name,
            "-r", "agent.svc.request", "-C", "application/json", "-t", queue, "-b", body.decode(),
        )  # fmt: skip
        reply: dict[str, Any] = {}
        async with asyncio.timeout(10):
            while not reply:
                done = await asyncio.to_thread(
                    subprocess.run,
                    [_amqp_tool("amqp-get"), "-u", url, "-q", queue],
                    capture_output=True,
                    timeout=30,
                )
                if done.returncode == 0 and done.stdout:
                    reply = orjson.loads(done.stdout)
    finally:
        run(_amqp_tool("amqp-delete-queue"), "-u", url, "-q", queue)

    assert reply["message_type"] == "response"
    assert reply["receiver_id"] == "shell"
    assert reply["payload"]["result"] == {"echo": {"from": "shell"}}
