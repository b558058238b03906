"""A call's progress notifications: each bus update, to the client that asked for progress."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from agentbus.mcp._tools import UPDATE_META

__all__ = ["Notifier"]


class Notifier:
    """Sends one call's updates as ``notifications/progress``, numbered 1, 2, ... in order.

    With the call's progress token (the client asked for progress) each notification
    carries the update itself in ``_meta`` (``agentbus/update``); on a transport that
    calls the client back directly (the SDK's in-process client) the message only.
    Without a progress token nothing is sent.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._ctx = ctx
        self._token = ctx.meta.get("progress_token") if ctx.meta else None
        self.sent = 0

    def __repr__(self) -> str:
        return f"<Notifier token={self._token!r} sent={self.sent}>"

    async def send(self, message: str, update: dict[str, Any]) -> None:
        """Tell the client ``message``, with ``update`` in its ``_meta``."""
        self.sent += 1
        if self._token is None:
            await self._ctx.session.report_progress(self.sent, None, message)
            return
        notification = types.ProgressNotification(
            params=types.ProgressNotificationParams(
                progress_token=self._token,
                progress=self.sent,
                message=message,
                meta={UPDATE_META: update},
            )
        )
        await self._ctx.session.send_notification(
            notification, related_request_id=self._ctx.request_id
        )
