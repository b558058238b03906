"""Work longer than the broker's consumer timeout, on a node where that timeout is 2 s.

RabbitMQ closes a channel whose delivery stays unacknowledged past ``consumer_timeout``
(30 minutes by default) and gives the delivery to a consumer again. A skill marked
``long_running`` is acknowledged when it starts, so the timeout never applies to it. A
question a skill asks holds no delivery at all while it waits: it outwaits the timeout,
and a kill -9 of its asker, and the work after the answer is done once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from chaos_support import BusOpener, eventually

from agentbus import Agent, InputRequired, RemoteError, Settings, current_request, skill
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    Ledger,
    PrivateBroker,
    PrivateBrokerError,
)

pytestmark = pytest.mark.chaos

CONSUMER_TIMEOUT_MS = 2000
WORK_SECONDS = 5.0  # well past the timeout, and past a channel tick (500 ms) after it
WAIT_SECONDS = 6.0  # a question's wait: three consumer timeouts, a tick past each
HERE = Path(__file__).parent


class Slow(Agent):
    name = "slow"
    runs: Counter[str] = Counter()

    @skill
    async def work(self) -> str:
        Slow.runs[current_request().message_id] += 1
        await asyncio.sleep(WORK_SECONDS)
        return "done"

    @skill(long_running=True)
    async def long_work(self) -> str:
        Slow.runs[current_request().message_id] += 1
        await asyncio.sleep(WORK_SECONDS)
        return "done"


@pytest.fixture(scope="module")
def impatient_broker(private_broker_node: PrivateBroker) -> Iterator[PrivateBroker]:
    """A node of its own whose consumer timeout is 2 s, checked every 500 ms."""
    erl_args = "-kernel inet_dist_use_interface {127,0,0,1} -rabbit channel_tick_interval 500"
    broker = PrivateBroker(
        "agentbus-impatient",
        config={"consumer_timeout": str(CONSUMER_TIMEOUT_MS)},
        env={"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": erl_args},
    )
    try:
        broker.start()
    except PrivateBrokerError as exc:
        broker.stop()
        pytest.fail(f"the private RabbitMQ node did not start: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
async def worker(impatient_broker: PrivateBroker, chaos_exchange: str) -> AsyncIterator[Slow]:
    Slow.runs = Counter()
    settings = Settings(url=impatient_broker.url, exchange=chaos_exchange, reconnect_interval=0.2)
    async with Slow(agent_id="slow-1", settings=settings, heartbeat_interval=1) as agent:
        yield agent


async def test_a_long_running_skill_outlives_the_consumer_timeout_once(
    impatient_broker: PrivateBroker, worker: Slow, open_bus: BusOpener
) -> None:
    """Acked as it starts: answered once, its channel never closed, nothing redelivered."""
    client = await open_bus(impatient_broker.url)
    reply = await client.request("slow", "long_work", timeout=30)
    assert reply.result == "done"
    assert list(Slow.runs.values()) == [1]
    assert worker.bus.stats.settle_failures == 0
    assert worker.bus.stats.duplicates == 0


async def test_an_ordinary_skill_past_the_timeout_loses_its_delivery(
    impatient_broker: PrivateBroker, worker: Slow, open_bus: BusOpener
) -> None:
    """The reason for long_running: the broker closes the channel under the work, which
    is cancelled, and gives the request back to run again from the start; on a classic
    queue each return counts toward the delivery limit (here 6 runs, then poison)."""
    client = await open_bus(impatient_broker.url)
    try:
        outcome = (await client.request("slow", "work", timeout=30)).result
    except RemoteError as exc:
        outcome = f"{exc.code}: {exc.message}"
    print(f"[consumer timeout, ordinary skill] outcome={outcome!r} stats={worker.bus.stats}")
    assert sum(Slow.runs.values()) >= 2  # the work began again after the broker took it back


async def test_a_question_outwaits_the_consumer_timeout_and_its_asker_s_kill(
    impatient_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
) -> None:
    """Asked, waited on 6 s (timeout 2 s), asker killed -9, answered: booked once."""
    processes: list[AgentProcess] = []

    def booker(agent_id: str) -> None:
        process = agent_process.start(
            "chaos_agents:Booker",
            *("--id", agent_id, "--heartbeat", "1"),
            url=impatient_broker.url,
            exchange=chaos_exchange,
            cwd=HERE,
        )
        processes.append(process)

    booker("booker-1")
    await processes[0].started()
    client = await open_bus(impatient_broker.url)
    with pytest.raises(InputRequired) as asked:
        await client.request("booker", "book", {"seat": "12A"}, timeout=30)
    question = asked.value.question
    key = question.request_id
    assert question.asker == "booker-1"

    # The wait itself is what is tested: past the consumer timeout three times over,
    # nothing is held, so nothing is taken back and run again.
    await asyncio.sleep(WAIT_SECONDS)
    assert [agent for _, agent in ledger.effects(f"run:{key}")] == ["booker-1"]

    processes[0].kill()
    await processes[0].exited(timeout=10)
    booker("booker-2")
    await processes[1].started()

    reply = await client.answer(question, True, timeout=30)
    assert reply.result == {"booked": True, "agent_id": "booker-2"}
    assert [agent for _, agent in ledger.effects(key)] == ["booker-2"]
    runs = await eventually(
        lambda: _runs(ledger, key), seconds=5, what="the run after the answer recorded"
    )
    assert runs == ["booker-1", "booker-2"]


async def _runs(ledger: Ledger, key: str) -> list[str] | None:
    runs = [agent for _, agent in ledger.effects(f"run:{key}")]
    return runs if len(runs) == 2 else None
