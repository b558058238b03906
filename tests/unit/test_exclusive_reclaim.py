"""An exclusive consumer back from a reconnect (bus/_rabbitmq/_amqp.py): the queue still
counting its old self for a moment is not another's, so it waits for the count to fall and
takes the queue again; a consumer still there after ``RECLAIM_WINDOW`` is another's, and it
gives its channel up. (A plan's reply queue: a leader that gave it up after a node's
restart, with nobody else holding it, let the plan's steps time out.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aiormq.exceptions
import pytest

from agentbus.bus._rabbitmq import _amqp
from agentbus.bus._rabbitmq._amqp import DeliveryConsumer


class _Underlay:
    """The channel under the robust one: counts the queue's consumers as told."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.declares = 0
        self.consumed = 0
        self.is_closed = False

    async def queue_declare(self, queue: str, *, passive: bool) -> Any:
        assert passive
        self.declares += 1
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        return SimpleNamespace(consumer_count=count)

    async def basic_consume(self, queue: str, callback: Any, **kw: Any) -> Any:
        assert kw["exclusive"]
        if self.counts[0]:
            raise aiormq.exceptions.ChannelAccessRefused("ACCESS_REFUSED - in exclusive use")
        self.consumed += 1
        return SimpleNamespace(consumer_tag=f"tag-{self.consumed}")


class _Robust:
    """The robust channel: its reopen calls the callbacks with the new underlay."""

    def __init__(self, underlay: _Underlay) -> None:
        self.underlay = underlay
        self.reopen_callbacks: set[Any] = set()
        self.closed = False

    async def get_underlay_channel(self) -> _Underlay:
        return self.underlay

    async def reopen(self) -> None:
        for callback in list(self.reopen_callbacks):
            await callback(self)

    async def close(self) -> None:
        self.closed = True


async def _started(counts: list[int]) -> tuple[_Robust, DeliveryConsumer]:
    underlay = _Underlay([0])
    robust = _Robust(underlay)

    async def deliver(_: Any) -> None:
        pass

    consumer = DeliveryConsumer(robust, "plan-q", deliver, exclusive=True)  # type: ignore[arg-type]
    await consumer.start()
    underlay.counts = counts  # the reconnect: what the broker counts now
    return robust, consumer


async def test_its_own_old_consumer_going_late_does_not_lose_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_amqp, "_RECLAIM_PAUSE", 0.001)
    robust, consumer = await _started([1, 1, 1, 0])
    await robust.reopen()
    assert robust.underlay.consumed == 2  # the start, and again after the count fell
    assert robust.underlay.declares == 4
    assert not robust.closed
    assert consumer.is_consuming_on(robust.underlay)  # type: ignore[arg-type]


async def test_a_queue_another_holds_past_the_window_is_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_amqp, "_RECLAIM_PAUSE", 0.001)
    monkeypatch.setattr(_amqp, "RECLAIM_WINDOW", 0.05)
    robust, _ = await _started([1])
    began = asyncio.get_running_loop().time()
    await robust.reopen()
    assert asyncio.get_running_loop().time() - began >= 0.05
    assert robust.underlay.consumed == 1  # the start only
    await asyncio.sleep(0)  # the channel's close, scheduled
    assert robust.closed
    assert not robust.reopen_callbacks  # not again at the next reopen
