"""``RedisDedupStore`` on a real Redis: one process takes a request, every process sees it.

Each store stands for one process (its own connection and running marker); several of
them on one server are instances on several hosts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from redis.asyncio import Redis

from agentbus.bus import DedupUnavailable, RedisDedupStore
from agentbus.envelopes import ErrorCode, encode
from support.redis_servers import RedisServer
from support.serving_fakes import Delivery, Work, request, serving_process
from support.waiting import wait_until

Stores = Callable[..., Awaitable[RedisDedupStore]]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def stores(redis_url: str, namespace: str) -> AsyncIterator[Stores]:
    """Make stores (processes) on the tier's Redis, in this test's namespace; close them."""
    async with AsyncExitStack() as stack:

        async def make(**options: Any) -> RedisDedupStore:
            store = RedisDedupStore(redis_url, 60.0, namespace=namespace, **options)
            stack.push_async_callback(store.aclose)
            return store

        yield make


async def _raw(url: str) -> Redis:
    return Redis.from_url(url)


async def test_of_processes_taking_a_request_at_once_exactly_one_gets_it(stores: Stores) -> None:
    processes = [await stores() for _ in range(20)]
    key = request().message_id

    seen = await asyncio.gather(*(store.check_in(key) for store in processes))

    assert seen.count(None) == 1
    assert all(s.elsewhere and s.reply is None for s in seen if s is not None)


async def test_the_holder_sees_its_own_run_and_the_others_see_it_elsewhere(stores: Stores) -> None:
    a, b = await stores(), await stores()
    key = request().message_id
    assert await a.check_in(key) is None

    own, other = await a.check_in(key), await b.check_in(key)

    assert own is not None
    assert (own.elsewhere, own.reply) == (False, None)
    assert other is not None
    assert (other.elsewhere, other.reply) == (True, None)


async def test_a_served_reply_answers_every_other_process(
    stores: Stores, redis_url: str, namespace: str
) -> None:
    a, b, c = await stores(), await stores(), await stores()
    asked = request()
    reply = asked.response({"n": 1, "kept": ["as sent"]}, sender_id="svc-a")
    await a.check_in(asked.message_id)
    await a.complete(asked.message_id, reply, "client-queue", encode(reply))

    for store in (b, c, a):
        seen = await store.check_in(asked.message_id)
        assert seen is not None
        assert seen.reply == reply
        assert seen.reply_to == "client-queue"
        assert not seen.elsewhere
    raw = await _raw(redis_url)
    try:
        ttl = await raw.pttl(f"{namespace}:dedup:{asked.message_id}")
    finally:
        await raw.aclose()
    assert 10_000 < ttl <= 60_000, "kept for the window, not the running marker's lease"


async def test_an_error_reply_and_a_reply_given_unencoded_are_kept(stores: Stores) -> None:
    a, b = await stores(), await stores()
    failed, plain = request(), request()
    error = failed.error(ErrorCode.INVALID_PARAMETERS, "n: bad", sender_id="svc-a")
    response = plain.response("fine", sender_id="svc-a")
    for asked, reply in ((failed, error), (plain, response)):
        await a.check_in(asked.message_id)
        await a.complete(asked.message_id, reply, None, None)

    seen_error, seen_response = (
        await b.check_in(failed.message_id),
        await b.check_in(plain.message_id),
    )

    assert seen_error is not None
    assert seen_error.reply == error
    assert seen_error.reply_to is None
    assert seen_response is not None
    assert seen_response.reply == response


async def test_work_done_without_a_reply_is_not_run_again(stores: Stores) -> None:
    a, b = await stores(), await stores()
    key = request().message_id
    await a.check_in(key)
    await a.complete(key, None, None, None)

    seen = await b.check_in(key)

    assert seen is not None
    assert (seen.reply, seen.elsewhere) == (None, False)


async def test_forget_lets_any_process_take_it_but_only_the_holder_can(stores: Stores) -> None:
    a, b = await stores(), await stores()
    key = request().message_id
    await a.check_in(key)
    await b.forget(key)  # not b's marker: stays
    still = await b.check_in(key)
    await a.forget(key)

    assert still is not None
    assert still.elsewhere
    assert await b.check_in(key) is None


async def test_the_marker_of_a_process_that_died_expires_after_its_lease(stores: Stores) -> None:
    a, b = await stores(lease=0.3), await stores()
    key = request().message_id
    await a.check_in(key)
    await a.aclose()  # dies: nobody renews its marker

    taken: list[bool] = []

    async def b_takes_it() -> bool:
        taken.append(await b.check_in(key) is None)
        return taken[-1]

    async with asyncio.timeout(10):
        while not await b_takes_it():  # noqa: ASYNC110 - a key's expiry, not an event
            await asyncio.sleep(0.05)
    assert taken[0] is False, "held while the lease ran"


async def test_a_running_marker_is_renewed_past_its_lease_while_its_work_runs(
    stores: Stores,
) -> None:
    a, b = await stores(lease=0.3), await stores()
    key = request().message_id
    await a.check_in(key)

    await wait_until(lambda: a.renewals >= 4, timeout=10)  # 4 x 0.1 s: past the lease

    seen = await b.check_in(key)
    assert seen is not None
    assert seen.elsewhere


async def test_a_task_cancelled_while_it_asks_the_store_is_cancelled(stores: Stores) -> None:
    """A cancel (a closing channel, a drain) is not lost in the client: on Python 3.11
    redis-py's sends went through ``asyncio.wait_for``, which swallowed it when the send was
    done already, and a loop of check-ins ran on after its task was cancelled."""
    store = await stores()
    asked = 0

    async def ask_forever() -> None:
        nonlocal asked
        while True:
            await store.check_in(request().message_id)
            asked += 1

    asking = asyncio.create_task(ask_forever())
    await wait_until(lambda: asked >= 50, timeout=10)
    asking.cancel()
    async with asyncio.timeout(10):
        await asyncio.gather(asking, return_exceptions=True)

    assert asking.cancelled()


async def test_teams_on_one_server_stay_apart(redis_url: str) -> None:
    key = request().message_id
    one = RedisDedupStore(redis_url, 60.0, namespace="team-one-test")
    two = RedisDedupStore(redis_url, 60.0, namespace="team-two-test")
    try:
        assert await one.check_in(key) is None
        assert await two.check_in(key) is None
        await one.forget(key)
        await two.forget(key)
    finally:
        await one.aclose()
        await two.aclose()


async def test_an_unreachable_server_raises_at_once_and_is_asked_again_later(
    private_redis: RedisServer, namespace: str
) -> None:
    clock = Clock()
    store = RedisDedupStore(private_redis.url, 60.0, namespace=namespace, clock=clock)
    try:
        assert await store.check_in(request().message_id) is None
        private_redis.stop()

        with pytest.raises(DedupUnavailable, match="ConnectionError"):
            await store.check_in(request().message_id)
        with pytest.raises(DedupUnavailable, match="less than a moment ago"):
            await store.complete("anything", None, None, None)  # not asked: down a moment ago

        private_redis.start()
        clock.now += 1.5  # past retry_after (1 s)
        assert await store.check_in(request().message_id) is None
    finally:
        await store.aclose()


async def test_a_server_that_never_answered_is_unavailable_not_an_error(namespace: str) -> None:
    store = RedisDedupStore("redis://127.0.0.1:1/0", 60.0, namespace=namespace)
    try:
        with pytest.raises(DedupUnavailable):
            await store.check_in(request().message_id)
    finally:
        await store.aclose()


async def test_two_dispatchers_on_redis_run_a_request_once_while_a_copy_waits(
    stores: Stores,
) -> None:
    """The bus's side with the real store: a copy that reaches another process while the
    first runs the request waits, and is answered with the first run's reply."""
    work = Work()
    a = serving_process("svc-a", work, await stores())
    b = serving_process("svc-b", work, await stores())
    first = Delivery(request())
    running = asyncio.create_task(a.dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request, redelivered=True)
    waiting = asyncio.create_task(b.dispatcher.on_service_message(copy))
    await wait_until(lambda: b.stats.dedup_waits == 1)
    work.finish.set()
    await asyncio.gather(running, waiting)

    assert work.runs == 1
    assert b.replies.sent == a.replies.sent
    assert (first.settled, copy.settled) == (["ack"], ["ack"])
    assert (a.stats.dedup_unavailable, b.stats.dedup_unavailable) == (0, 0)
