"""Translate aio-pika / aiormq exceptions into the agentbus exception tree."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, TypeVar

import aiormq.exceptions

from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    BrokerUnavailable,
    ConfigurationError,
    ConnectionLost,
    PublishFailed,
    QueueInUse,
    TLSError,
    TransportError,
)
from agentbus.security import tls_failure

__all__ = ["CONNECT_ERRORS", "map_connect_errors", "map_transport_errors", "through_reconnects"]

T = TypeVar("T")

CONNECT_ERRORS = (aiormq.exceptions.AMQPError, OSError, TimeoutError)
"""What a failed connection attempt raises."""

NOT_OPENED: Final = "Connection was not opened"
"""What aio-pika's ``Connection.channel()`` raises (a ``RuntimeError``) while a robust
connection has no transport, between a loss and its reconnect: the one library message this
module reads. tests/unit/test_transport_errors.py fails when aio-pika changes it."""

CLOSED: Final = " closed"
"""How aiormq's ``Connection.channel()`` ends the ``RuntimeError`` it raises on a closed
connection (``<Connection: ...> closed``), which a robust connection still holds in the
moment after a loss: read as a ``ConnectionLost``; tests/unit/test_transport_errors.py fails
when aiormq changes it."""

IN_EXCLUSIVE_USE: Final = "in exclusive use"
"""RabbitMQ's ACCESS_REFUSED text when a queue's exclusive consumer stands in the way."""
NO_LOCAL_REPLICA: Final = "does not have a replica on the local node"
"""RabbitMQ's PRECONDITION_FAILED text for a consumer of a stream on a node whose replica of
it is not running: for a while after the node restarted (the stream coordinator starts
it again), which is waited out as a reconnect is."""


def translate(exc: BaseException) -> AgentBusError | None:
    """Return the agentbus error for a transport exception, or ``None`` if it is not one."""
    match exc:
        case aiormq.exceptions.ChannelAccessRefused() if IN_EXCLUSIVE_USE in str(exc):
            return QueueInUse(f"another consumer has the queue to itself: {exc}")
        case aiormq.exceptions.ChannelAccessRefused():
            return AccessRefused(f"the broker refused access: {exc}")
        case aiormq.exceptions.ChannelPreconditionFailed() if NO_LOCAL_REPLICA in str(exc):
            return ConnectionLost(f"the stream's replica on this node is not up yet: {exc}")
        case aiormq.exceptions.ChannelPreconditionFailed():
            return ConfigurationError(
                f"the broker refused a declaration that conflicts with an existing one: {exc}"
            )
        case aiormq.exceptions.PublishError():
            # A return without on_return_raises never raises; keep it a publish failure.
            return PublishFailed(f"the broker returned the message: {exc}")
        case aiormq.exceptions.DeliveryError():
            return PublishFailed(f"the broker did not accept the message (nack): {exc}")
        case (
            aiormq.exceptions.ConnectionClosed()
            | aiormq.exceptions.ChannelClosed()
            | aiormq.exceptions.ChannelInvalidStateError()
            | aiormq.exceptions.AMQPConnectionError()
            | ConnectionError()
        ):
            return ConnectionLost(f"the connection to the broker was lost: {exc!r}")
        case aiormq.exceptions.AMQPError():
            return TransportError(f"AMQP error: {exc!r}")
        case RuntimeError() if str(exc) == NOT_OPENED:
            return ConnectionLost(f"the connection to the broker is reconnecting: {exc}")
        case RuntimeError() if str(exc).startswith("<Connection") and str(exc).endswith(CLOSED):
            return ConnectionLost(f"the connection to the broker was lost: {exc}")
    return None


@contextlib.contextmanager
def map_transport_errors() -> Iterator[None]:
    """Raise transport exceptions raised inside the block as agentbus errors."""
    try:
        yield
    except AgentBusError:
        raise
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc


async def through_reconnects(operation: Callable[[], Awaitable[T]], *, seconds: float) -> T:
    """Run ``operation``; while it fails with ``ConnectionLost`` (the robust connection is
    restoring its channels), run it again, for up to ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = 0.05
    while True:
        try:
            return await operation()
        except ConnectionLost:
            if loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


@contextlib.contextmanager
def map_connect_errors(
    masked_url: str, *, secure: bool = False, client_cert: bool = False
) -> Iterator[None]:
    """Raise a failure to connect as ``BrokerUnavailable`` naming the (masked) URL.

    A failed TLS handshake (or a plain connection to a TLS port) is ``TLSError``, whose
    one line says which side refused what. ``secure``: the URL is ``amqps://``;
    ``client_cert``: a client certificate is presented.
    """
    try:
        yield
    except CONNECT_ERRORS as exc:
        which = tls_failure(exc, secure=secure, client_cert=client_cert)
        if which is not None:
            raise TLSError(
                f"cannot connect to the broker at {masked_url}: {which}",
                details={"url": masked_url},
            ) from exc
        hint = (
            "is RabbitMQ running? Start one with 'rabbitmq-server -detached' "
            "(or 'docker run -d -p 5672:5672 rabbitmq:3'), or set AGENTBUS_URL"
        )
        if isinstance(
            exc,
            aiormq.exceptions.ProbableAuthenticationError | aiormq.exceptions.AuthenticationError,
        ):
            hint = (
                "the broker refused the credentials (the user and password in AGENTBUS_URL, "
                "or the client certificate's user: is it known to the broker?)"
            )
        raise BrokerUnavailable(
            f"cannot connect to the broker at {masked_url}: {type(exc).__name__}: {exc}; {hint}",
            details={"url": masked_url},
        ) from exc
