"""The shared task store and its event stream on a real Redis, as the SDK's handler uses them."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from a2a.auth.user import User
from a2a.server.cluster import ConcurrentTaskModificationError, TaskVersion
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as a2a

from agentbus.gateway._shared_push import RedisPushConfigs
from agentbus.gateway._shared_tasks import RedisTaskEvents, RedisTaskStore, connect
from support.redis_servers import tier_redis_url

WORKING = a2a.TaskState.TASK_STATE_WORKING
COMPLETED = a2a.TaskState.TASK_STATE_COMPLETED
CANCELED = a2a.TaskState.TASK_STATE_CANCELED


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisTaskStore]:
    redis = connect(redis_url)
    prefix = f"test-{uuid.uuid4().hex[:10]}:a2a"
    try:
        yield RedisTaskStore(
            redis, prefix=prefix, size=3, retention=60, open_expiry=60, waiting_expiry=60
        )
    finally:
        keys = [key async for key in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


class _User(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def caller(name: str = "alice") -> ServerCallContext:
    return ServerCallContext(user=_User(name))


def task(state: int, task_id: str = "t1") -> a2a.Task:
    return a2a.Task(id=task_id, context_id="c1", status=a2a.TaskStatus(state=state))  # type: ignore[arg-type]


def status(state: int, task_id: str = "t1") -> a2a.TaskStatusUpdateEvent:
    return a2a.TaskStatusUpdateEvent(
        task_id=task_id,
        context_id="c1",
        status=a2a.TaskStatus(state=state),  # type: ignore[arg-type]
    )


async def test_writes_compare_the_version_they_came_from(store: RedisTaskStore) -> None:
    """First write: version 1; a write from a stale version is refused; a read gives the
    task with its version; another caller sees nothing."""
    alice = caller()
    first = await store.save(task(WORKING), event=None, prev=None,
                             prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    with pytest.raises(ConcurrentTaskModificationError):
        await store.save(task(WORKING), event=None, prev=None,
                         prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    second = await store.save(task(COMPLETED), event=status(COMPLETED), prev=None,
                              prev_version=first, context=alice)  # fmt: skip
    with pytest.raises(ConcurrentTaskModificationError):
        await store.save(task(WORKING), event=None, prev=None, prev_version=first, context=alice)
    stored = await store.get("t1", alice)
    assert stored is not None
    assert (stored.task.status.state, stored.version) == (COMPLETED, second)
    assert second.is_after(first)
    assert await store.get("t1", caller("bob")) is None


async def test_a_cancel_overwrites_an_open_task_but_not_a_finished_one(
    store: RedisTaskStore,
) -> None:
    alice = caller()
    await store.save(task(WORKING), event=None, prev=None,
                     prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    # From a version that is not the stored one: a cancel needs none.
    await store.save(task(CANCELED), event=status(CANCELED), prev=None,
                     prev_version=TaskVersion(42), context=alice)  # fmt: skip
    with pytest.raises(ConcurrentTaskModificationError):
        await store.save(task(CANCELED), event=status(CANCELED), prev=None,
                         prev_version=TaskVersion(42), context=alice)  # fmt: skip
    with pytest.raises(ConcurrentTaskModificationError):  # absent
        await store.save(task(CANCELED, "t2"), event=None, prev=None,
                         prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip


async def test_over_the_bound_the_oldest_finished_tasks_go(store: RedisTaskStore) -> None:
    """Bound 3: an open task stays however old; the oldest finished ones go."""
    alice = caller()
    await store.save(task(WORKING, "open"), event=None, prev=None,
                     prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    for n in range(4):
        await store.save(task(COMPLETED, f"done-{n}"), event=None, prev=None,
                         prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    listed = await store.list(a2a.ListTasksRequest(), alice)
    assert sorted(t.id for t in listed.tasks) == ["done-2", "done-3", "open"]
    assert await store.get("done-0", alice) is None
    finished = await store.list(a2a.ListTasksRequest(status=COMPLETED), alice)
    assert sorted(t.id for t in finished.tasks) == ["done-2", "done-3"]


async def test_a_subscriber_gets_the_events_after_its_version_even_written_before_it_read(
    store: RedisTaskStore, redis_url: str
) -> None:
    """Events written between the snapshot and the subscription's first read are not lost;
    those up to the snapshot's version are not repeated."""
    alice = caller()
    redis = connect(redis_url)
    events = RedisTaskEvents(redis, store)
    try:
        v1 = await store.save(task(WORKING), event=task(WORKING), prev=None,
                              prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
        v2 = await store.save(task(WORKING), event=status(WORKING), prev=None,
                              prev_version=v1, context=alice)  # fmt: skip
        subscription = events.subscribe("t1", after=v1)
        async with contextlib.aclosing(subscription):
            first = await anext(subscription)
            pending = asyncio.ensure_future(anext(subscription))
            await store.save(task(COMPLETED), event=status(COMPLETED), prev=None,
                             prev_version=v2, context=alice)  # fmt: skip
            second = await asyncio.wait_for(pending, 10)
    finally:
        await redis.aclose()
    assert first.version == v2
    assert isinstance(first.event, a2a.TaskStatusUpdateEvent)
    assert isinstance(second.event, a2a.TaskStatusUpdateEvent)
    assert second.event.status.state == COMPLETED


async def test_a_new_task_id_reads_as_nothing_until_written_then_as_written(
    store: RedisTaskStore,
) -> None:
    alice = caller()
    task_id = store.new_id()
    assert await store.get(task_id, alice) is None
    version = await store.save(task(WORKING, task_id), event=None, prev=None,
                               prev_version=TaskVersion.MISSING, context=alice)  # fmt: skip
    stored = await store.get(task_id, alice)
    assert stored is not None
    assert (stored.task.id, stored.version) == (task_id, version)


async def test_webhooks_are_kept_per_owner_and_all_are_dispatched(redis_url: str) -> None:
    """Each caller reads and deletes its own webhooks; dispatch sees every caller's; a
    config without an id takes the task's, and replaces the one with that id."""
    redis = connect(redis_url)
    prefix = f"test-{uuid.uuid4().hex[:10]}:a2a"
    configs = RedisPushConfigs(redis, prefix=prefix, expiry=60)
    alice, bob = caller("alice"), caller("bob")
    try:
        hook = a2a.TaskPushNotificationConfig(url="https://a.example/hook", token="one")
        stored = await configs.set_info("t1", hook, alice)
        assert (stored.id, stored.task_id) == ("t1", "t1")  # no id: the task's
        await configs.set_info(
            "t1", a2a.TaskPushNotificationConfig(url="https://a.example/2"), alice
        )
        await configs.set_info(
            "t1", a2a.TaskPushNotificationConfig(id="b", url="https://b.example/"), bob
        )
        assert [c.url for c in await configs.get_info("t1", alice)] == ["https://a.example/2"]
        assert [c.url for c in await configs.get_info("t1", bob)] == ["https://b.example/"]
        dispatched = await configs.get_info_for_dispatch("t1")
        assert sorted(c.url for c in dispatched) == ["https://a.example/2", "https://b.example/"]
        await configs.delete_info("t1", alice)
        assert [c.url for c in await configs.get_info_for_dispatch("t1")] == ["https://b.example/"]
        await configs.delete_info("t1", bob, "b")
        assert await configs.get_info_for_dispatch("t1") == []
    finally:
        keys = [key async for key in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
