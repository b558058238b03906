"""Opening a connection to the broker: the one way agentbus connects.

The bus, the audit reader and the chaos kit's ledger all connect here: to the nodes the
URL names (failing over between them), over TLS when they are ``amqps://``, logging in
as the settings say, with a failure to connect raised as ``BrokerUnavailable`` (or its
``TLSError``) naming the URL without its password.
"""

from __future__ import annotations

from aio_pika.abc import AbstractRobustConnection

from agentbus._config import Settings, mask_url
from agentbus.bus._rabbitmq._errors import map_connect_errors
from agentbus.bus._rabbitmq._failover import NodeListener, connect_to_nodes
from agentbus.bus._rabbitmq._nodes import broker_nodes
from agentbus.security import login_mechanism, tls_context

__all__ = ["open_connection"]


async def open_connection(
    settings: Settings,
    *,
    name: str | None = None,
    on_node: NodeListener | None = None,
) -> AbstractRobustConnection:
    """Open a robust connection to the broker that ``settings`` name.

    The first of the URL's nodes that answers is taken; each reconnect tries the next.

    Args:
        settings: The broker URL, TLS files, login mechanism and connection timings.
        name: The connection's name, as the broker shows it (``connection_name``).
        on_node: Told the (masked) URL of the node each connection is made to.

    Raises:
        BrokerUnavailable: no node can be reached, or the broker refused the login.
        TLSError: the TLS handshake failed (or a plain connection met a TLS port).
        ConfigurationError: the URL or the TLS settings are not valid.
    """
    nodes = broker_nodes(settings.url)
    context = tls_context(settings, nodes)
    mechanism = login_mechanism(settings)
    with map_connect_errors(
        mask_url(settings.url),
        secure=context is not None,
        client_cert=settings.tls_cert_file is not None,
    ):
        return await connect_to_nodes(
            nodes,
            timeout=settings.connect_timeout,
            on_node=on_node,
            reconnect_interval=settings.reconnect_interval,
            heartbeat=settings.heartbeat,
            ssl_context=context,
            auth=None if mechanism == "plain" else mechanism,
            client_properties=None if name is None else {"connection_name": name},
        )
