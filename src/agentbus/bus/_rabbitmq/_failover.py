"""A robust connection over a cluster's nodes: each reconnect attempt goes to the next node.

aio-pika's ``RobustConnection`` reconnects to the one URL it was given, restoring
channels, topology and consumers. ``FailoverConnection`` keeps all of that and
changes only where an attempt goes. aio-pika has no hook for it: the one seam is
that every connection attempt starts by setting ``transport`` to None and then
connects to ``self.url`` (``RobustConnection.__connect_transport``).
``tests/unit/test_failover_seam.py`` fails the day that changes.

A closed connection also releases the publishes waiting for room in its write queue
(``release_writes``): aiormq's writer is gone by then, and a publish that found the queue
full (ten frames) would wait there, holding its channel's lock, until its own timeout.
``tests/integration/test_delivery_seam.py`` fails if they wait.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from aio_pika import RobustConnection
from aio_pika.abc import UnderlayConnection
from aio_pika.connection import make_url

from agentbus._config import mask_url
from agentbus._logging import get_logger
from agentbus.bus._rabbitmq._errors import CONNECT_ERRORS

__all__ = ["FailoverConnection", "NodeListener", "connect_to_nodes", "release_writes"]

NodeListener = Callable[[str], None]
"""Told the (masked) URL of the node each new connection is made to."""

_log = get_logger("agentbus.bus")


class FailoverConnection(RobustConnection):
    """A robust connection that tries the next of ``nodes`` on each reconnect attempt."""

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        on_node: NodeListener | None = None,
        client_properties: dict[str, Any] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        **parameters: Any,
    ) -> None:
        # As connect_robust does: parameters (heartbeat, reconnect_interval...) travel in
        # each node's URL query, where aiormq reads them, and to the constructor too.
        self.nodes = tuple(make_url(node, **dict(parameters)) for node in nodes)
        self._index = 0
        self._attempts = 0
        self._on_node = on_node
        self._ready = False
        # The TLS context goes as an object: no certificate path ever sits in a URL.
        super().__init__(
            self.nodes[0],
            client_properties=client_properties,
            ssl_context=ssl_context,
            **parameters,
        )
        self._ready = True

    @property
    def node(self) -> str:
        """The (masked) URL of the node this connection is, or last was, made to."""
        return mask_url(str(self.nodes[self._index].with_query(None)))

    @property
    def transport(self) -> UnderlayConnection | None:
        """The live AMQP connection, if any (aio-pika's attribute)."""
        return self._transport

    @transport.setter
    def transport(self, value: UnderlayConnection | None) -> None:
        self._transport = value
        if value is None and self._ready and not self._close_called:
            # An attempt (or the close) begins: after the first, the next node.
            if self._attempts:
                self._index = (self._index + 1) % len(self.nodes)
                self.url = self.nodes[self._index]
                if len(self.nodes) > 1:
                    _log.info(
                        "reconnecting to the next broker node",
                        node=self.node,
                        attempt=self._attempts,
                        interval=self.reconnect_interval,
                    )
            self._attempts += 1

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if self._transport is not None:
            await release_writes(self._transport.connection.write_queue)
        await super()._on_connection_close(closing)

    async def _on_connected(self) -> None:
        await super()._on_connected()
        if self._on_node is not None:
            self._on_node(self.node)


async def release_writes(queue: asyncio.Queue[Any]) -> None:
    """Empty a closed connection's write queue until no publish is left waiting for room.

    Each publish it wakes puts its frames and then meets its confirmation, which the close
    has already failed: it raises at once, and the publisher retries on the new channel.
    """
    while not queue.empty():
        while not queue.empty():
            queue.get_nowait()
        await asyncio.sleep(0)  # the woken publishes put their frames


async def connect_to_nodes(
    nodes: Sequence[str],
    *,
    timeout: float,
    on_node: NodeListener | None = None,
    **kwargs: Any,
) -> FailoverConnection:
    """Connect to the first of ``nodes`` that answers, trying each once in order.

    Raises:
        The last node's connection error, when none answers.
    """
    failure: BaseException | None = None
    for start in range(len(nodes)):
        order = [*nodes[start:], *nodes[:start]]
        connection = FailoverConnection(order, on_node=on_node, **kwargs)
        try:
            await connection.connect(timeout=timeout)
        except CONNECT_ERRORS as exc:
            failure = exc
            await connection.close()
            if len(nodes) > 1:
                _log.debug("broker node unreachable", node=connection.node, error=str(exc))
            continue
        return connection
    assert failure is not None
    raise failure
