"""The gateway's bounds, without a broker: the task store's size and retention, open tasks."""

from __future__ import annotations

import pytest
from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidRequestError

from agentbus.gateway._tasks import BoundedTaskStore, OpenTasks


class _User(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def _task(task_id: str, state: a2a.TaskState.ValueType) -> a2a.Task:
    return a2a.Task(id=task_id, context_id="c", status=a2a.TaskStatus(state=state))


async def test_the_store_drops_the_oldest_finished_tasks_beyond_its_size() -> None:
    """Open tasks stay; finished ones beyond the size go, oldest first."""
    store = BoundedTaskStore(size=3, retention=3600, waiting=3600)
    alice = ServerCallContext(user=_User("alice"))
    await store.save(_task("open", a2a.TaskState.TASK_STATE_WORKING), alice)
    for n in range(4):
        await store.save(_task(f"done{n}", a2a.TaskState.TASK_STATE_COMPLETED), alice)
    kept = [t for t in ("open", "done0", "done1", "done2", "done3") if await store.get(t, alice)]
    assert kept == ["open", "done2", "done3"]
    assert len(store) == 3


async def test_the_store_forgets_finished_tasks_after_the_retention() -> None:
    """A finished task is gone once its retention has passed; running ones stay."""
    store = BoundedTaskStore(size=100, retention=1e-9, waiting=3600)
    bob = ServerCallContext(user=_User("bob"))
    await store.save(_task("t1", a2a.TaskState.TASK_STATE_FAILED), bob)
    assert await store.get("t1", bob) is None  # read back after its retention
    await store.save(_task("t2", a2a.TaskState.TASK_STATE_WORKING), bob)
    assert await store.get("t2", bob) is not None
    assert len(store) == 1


async def test_the_store_keeps_a_waiting_task_for_its_own_retention() -> None:
    """A task waiting for input is kept ``waiting`` seconds, however short the finished
    tasks' retention; once past it, it is gone, and an answered one is kept as before."""
    store = BoundedTaskStore(size=100, retention=1e-9, waiting=3600)
    cy = ServerCallContext(user=_User("cy"))
    await store.save(_task("asks", a2a.TaskState.TASK_STATE_INPUT_REQUIRED), cy)
    await store.save(_task("auth", a2a.TaskState.TASK_STATE_AUTH_REQUIRED), cy)
    assert await store.get("asks", cy) is not None
    await store.save(_task("auth", a2a.TaskState.TASK_STATE_WORKING), cy)  # answered
    short = BoundedTaskStore(size=100, retention=3600, waiting=1e-9)
    await short.save(_task("asks", a2a.TaskState.TASK_STATE_INPUT_REQUIRED), cy)
    await short.save(_task("runs", a2a.TaskState.TASK_STATE_WORKING), cy)
    assert await short.get("asks", cy) is None
    assert await short.get("runs", cy) is not None
    assert (len(store), len(short)) == (2, 1)


def test_open_tasks_refuse_beyond_the_limit_and_free_slots() -> None:
    """The limit+1st reservation is refused with an error naming the limit."""
    slots = OpenTasks(2)
    slots.reserve("a")
    slots.reserve("b")
    with pytest.raises(InvalidRequestError, match="2 open tasks") as caught:
        slots.reserve("c")
    assert caught.value.data == {"reason": "too_many_open_tasks", "limit": 2}
    slots.claim("a")
    slots.release_unclaimed("a")  # claimed by running work: kept
    slots.release_unclaimed("b")  # never started: freed
    assert len(slots) == 1
    slots.release("a")
    slots.reserve("c")
    assert len(slots) == 1
