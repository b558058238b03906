"""The failover seam: aio-pika's reconnect attempt, as ``FailoverConnection`` relies on it.

``FailoverConnection`` moves to the next node when an attempt begins, which aio-pika
marks by clearing ``transport`` before connecting to ``self.url``. If aio-pika changes
that, these fail (and the chaos tier's failover test times out).
"""

from __future__ import annotations

import inspect

from aio_pika import RobustConnection
from aio_pika.connection import Connection

from agentbus.bus._rabbitmq._failover import FailoverConnection

NODES = ("amqp://u:pw@node-1:5672/", "amqp://u:pw@node-2:5672/", "amqp://u:pw@node-3:5672/")


def test_a_reconnect_attempt_clears_the_transport_then_connects_to_self_url() -> None:
    """RobustConnection's attempt: ``self.transport = None``, then ``Connection.connect``."""
    attempt = inspect.getsource(RobustConnection._RobustConnection__connect_transport)  # type: ignore[attr-defined]
    cleared = attempt.index("self.transport = None")
    assert attempt.index("Connection.connect(self", cleared) > cleared
    assert "self.url" in inspect.getsource(Connection.connect)


async def test_each_attempt_after_the_first_goes_to_the_next_node_round_robin() -> None:
    """The first attempt takes node one; each further attempt the next, wrapping around."""
    connection = FailoverConnection(NODES)
    seen = []
    for _ in range(4):
        connection.transport = None  # what aio-pika does as an attempt begins
        seen.append(str(connection.url.with_query(None)))
    assert seen == [NODES[0], NODES[1], NODES[2], NODES[0]]
    assert connection.node == "amqp://u:***@node-1:5672/"


async def test_closing_does_not_move_to_another_node() -> None:
    """A close clears the transport too, but is not an attempt."""
    connection = FailoverConnection(NODES)
    connection.transport = None
    connection._close_called = True
    connection.transport = None
    assert str(connection.url) == NODES[0]


async def test_one_node_is_always_that_node() -> None:
    """A single URL behaves as aio-pika's own robust connection."""
    connection = FailoverConnection(NODES[:1])
    for _ in range(3):
        connection.transport = None
    assert str(connection.url) == NODES[0]


async def test_connection_parameters_reach_every_node_as_connect_robust_sends_them() -> None:
    """Heartbeat and reconnect interval go in each node's URL query; the name to the connection."""
    connection = FailoverConnection(
        NODES[:2],
        heartbeat=2,
        reconnect_interval=0.25,
        client_properties={"connection_name": "agentbus:a-1"},
    )
    for node in connection.nodes:
        assert node.query["heartbeat"] == "2"
    assert connection.kwargs["client_properties"] == {"connection_name": "agentbus:a-1"}
    assert connection.reconnect_interval == 0.25
