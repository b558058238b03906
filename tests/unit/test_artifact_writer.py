"""The artifact stream's writer: a chunk whose confirm never comes is a clear error."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aio_pika.abc import AbstractChannel

from agentbus import ConnectionLost
from agentbus.bus._rabbitmq._artifact_stream import _Writer


class Unconfirmed:
    """A channel whose publishes time out, as aiormq's confirm wait does when a stream's
    node went away and neither a confirm nor a close comes."""

    def __init__(self) -> None:
        self.published = 0

    async def get_underlay_channel(self) -> Unconfirmed:
        return self

    async def basic_publish(self, body: bytes, **_: Any) -> None:
        self.published += 1
        raise TimeoutError


async def test_a_chunk_not_confirmed_in_time_is_connection_lost_not_a_bare_timeout() -> None:
    channel = Unconfirmed()
    writer = _Writer(
        cast(AbstractChannel, channel), "ex.artifacts.a.b", "art-1", lambda *_: None, 1024
    )
    with pytest.raises(ConnectionLost, match="not confirmed within 30 s"):
        await writer.send(b"chunk", "chunk", 0, wait=True)
    assert channel.published == 1
