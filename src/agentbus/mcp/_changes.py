"""Telling clients that the tools (and the card resources) changed, in both protocol eras.

One publish reaches every client: a 2026-07-28 client through the ``subscriptions/listen``
stream it opened (the SDK's ``ListenHandler``), a handshake-era client as
``notifications/tools/list_changed`` and ``notifications/resources/list_changed`` on its
connection. For the latter, the ``notifications/initialized`` handler does not return:
the SDK runs it in the connection's task group, so it forwards changes for exactly as
long as the connection lives, and is cancelled with it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)

__all__ = ["Changes"]

_BACKLOG: Final = 16
"""Changes a slow handshake-era connection may owe before more are merged into them."""


class Changes:
    """The change fan-out of one server: ``listen`` for 2026 clients, ``follow`` for the rest."""

    def __init__(self) -> None:
        self.subscriptions = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.subscriptions)
        """The ``subscriptions/listen`` handler (2026-07-28 clients)."""
        self.following = 0
        """Handshake-era connections being told of changes."""

    def __repr__(self) -> str:
        return f"<Changes following={self.following}>"

    async def publish(self) -> None:
        """Tell every client that the tools and the resources changed."""
        await self.subscriptions.publish(ToolsListChanged())
        await self.subscriptions.publish(ResourcesListChanged())

    def close(self) -> None:
        """End the listen streams (the server is going away)."""
        self.listen.close()

    async def follow(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
    ) -> None:
        """The ``notifications/initialized`` handler: forward changes to this connection
        until it closes."""
        send, receive = anyio.create_memory_object_stream[ServerEvent](_BACKLOG)

        def deliver(event: ServerEvent) -> None:
            # A connection that owes a backlog already has a change to refetch for.
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
                send.send_nowait(event)

        unsubscribe = self.subscriptions.subscribe(deliver)
        self.following += 1
        try:
            async with receive:
                async for event in receive:
                    if isinstance(event, ToolsListChanged):
                        await ctx.session.send_tool_list_changed()
                    elif isinstance(event, ResourcesListChanged):
                        await ctx.session.send_resource_list_changed()
        finally:
            self.following -= 1
            unsubscribe()
            send.close()
