"""The blocking client on the real broker, from plain threads: requests, plans, tasks,
questions, sixteen threads at once, and a close while a call waits.

The team (a registry, a leader, a ``Worker``) runs on the test's loop; every blocking
call runs in a thread of its own (``asyncio.to_thread``, a thread pool), as it would in a
Django or Flask worker, and the client runs its own loop in its own thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from helpers import BusFactory
from sample_agents import Worker

import agentbus
from agentbus import (
    Agent,
    BusClosed,
    InputRequired,
    Leader,
    Question,
    RemoteError,
    Settings,
    SyncBus,
)
from agentbus.leader import PlanState, PlanStatus
from agentbus.registry import Registry
from support.broker import delete_topology

pytestmark = pytest.mark.integration

T = TypeVar("T")
BEAT = 0.5


@dataclass
class Team:
    settings: Settings
    worker: Worker


@pytest.fixture
async def team(broker_url: str, exchange_name: str, make_bus: BusFactory) -> AsyncIterator[Team]:
    """A registry, a leader and a worker on this test's exchange, on the test's loop."""
    worker = Worker(bus=await make_bus("worker-1"), heartbeat_interval=BEAT)
    agents: list[Agent] = [
        Registry(bus=await make_bus("registry-1"), heartbeat_interval=BEAT),
        Leader(bus=await make_bus("leader-1"), heartbeat_interval=BEAT),
        worker,
    ]
    for agent in agents:
        await agent.start()
    try:
        yield Team(Settings(url=broker_url, exchange=exchange_name), worker)
    finally:
        for agent in reversed(agents):
            await agent.stop(grace=0.5)
        await delete_topology(broker_url, exchange_name)


async def in_thread(function: Callable[[], T]) -> T:
    """Run blocking code in a thread of its own, as a web server's worker would."""
    return await asyncio.to_thread(function)


async def test_a_request_a_plan_a_task_and_its_status_from_a_thread(team: Team) -> None:
    """connect_sync, then each kind of call a web view makes, with their answers."""

    def view() -> dict[str, Any]:
        with agentbus.connect_sync(settings=team.settings) as bus:
            square = bus.call("worker", "square", {"n": 4}, timeout=10)
            plan = bus.run_plan(
                {
                    "subtasks": [
                        {"id": "a", "skill": "square", "parameters": {"n": 2}},
                        {"id": "b", "skill": "square", "parameters": {"n": 3}},
                        {
                            "id": "sum",
                            "skill": "total",
                            "inputs": {"values": ["a", "b"]},
                            "depends_on": ["a", "b"],
                        },
                    ]
                },
                timeout=30,
            )
            task = bus.submit_task("worker", "square", {"n": 5, "delay": 0.2}, timeout=30)
            first_look = _known(bus, task.id).state
            aggregate = task.result(30)
            return {
                "square": square,
                "plan": (plan.status, plan.subtask("sum").result),
                "first_look": first_look,
                "task": aggregate.subtask("task").result,
                "status": bus.plan_status(task.id).state,
            }

    seen = await in_thread(view)
    assert seen["square"] == 16
    assert seen["plan"] == (PlanStatus.COMPLETED, 13)
    assert seen["first_look"] in {"running", "ended"}
    assert seen["task"] == 25
    assert seen["status"] == "ended"


def _known(bus: SyncBus, plan_id: str, within: float = 10.0) -> PlanState:
    """The plan's state once a leader has taken it from its queue (a moment after it is
    sent: until then no leader knows it)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return bus.plan_status(plan_id, timeout=2)
        except RemoteError:
            assert time.monotonic() < deadline, f"no leader took {plan_id}"
            time.sleep(0.02)


async def test_a_question_is_answered_in_the_calling_thread_or_later_from_another(
    team: Team,
) -> None:
    """on_question runs in the caller's thread; without it, InputRequired, and answer()
    from a second thread finishes the work."""

    def converse() -> tuple[int, int, bool]:
        here = threading.get_ident()
        asked_here: list[bool] = []

        def on_question(question: Question) -> int:
            asked_here.append(threading.get_ident() == here)
            return 2

        with SyncBus(settings=team.settings) as bus:
            answered = bus.call("worker", "power", {"n": 3}, on_question=on_question, timeout=10)
            with pytest.raises(InputRequired) as asked:
                bus.request("worker", "power", {"n": 2}, timeout=10)
            with ThreadPoolExecutor(1) as other:
                later = other.submit(bus.answer, asked.value.question, 5, timeout=10).result(20)
        return answered, later.result, all(asked_here) and len(asked_here) == 1

    assert await in_thread(converse) == (9, 32, True)


async def test_sixteen_threads_share_one_client(team: Team) -> None:
    """One client, sixteen threads calling at once: every answer goes to its caller."""

    def hammer() -> list[list[int]]:
        with agentbus.connect_sync(settings=team.settings) as bus:

            def calls(worker: int) -> list[int]:
                return [
                    bus.call("worker", "square", {"n": worker * 100 + n}, timeout=20)
                    for n in range(10)
                ]

            with ThreadPoolExecutor(16) as pool:
                return list(pool.map(calls, range(16)))

    answers = await in_thread(hammer)
    assert answers == [[(w * 100 + n) ** 2 for n in range(10)] for w in range(16)]


async def test_close_while_a_call_waits_fails_it_with_bus_closed(team: Team) -> None:
    """A thread waits on a skill that hangs; closing the client from another thread
    makes its call raise BusClosed, and the client ends closed."""
    bus = await in_thread(lambda: agentbus.connect_sync(settings=team.settings))
    outcome: list[BaseException] = []

    def waiting() -> None:
        try:
            bus.call("worker", "hang", timeout=60)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiting)
    thread.start()
    await asyncio.wait_for(team.worker._hanging.wait(), 10)  # the call is at the worker
    await in_thread(bus.close)
    await in_thread(lambda: thread.join(10))
    assert [type(error) for error in outcome] == [BusClosed]
    assert not bus.is_open
