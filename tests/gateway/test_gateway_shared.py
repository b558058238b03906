"""Several gateway processes, one set of tasks: a task one process runs, another answers for.

Each gateway here is an ``agentbus gateway`` process of its own with ``--task-store`` on a
real Redis (``$AGENTBUS_TEST_DEDUP_URL``, else a private server). Two on two ports show
which process answers; ``--workers 2`` puts two behind one address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import TaskNotFoundError
from a2a_client import sdk_client, send, state_name, user_message
from gateway_agents import Calc, Clerk
from gateway_team import KEY, OTHER_KEY, Team
from test_gateway_cli import wait_listed
from webhook_server import sent, serving_webhook

from agentbus import Agent, current_request, skill
from support.ports import free_port
from support.redis_servers import tier_redis_url
from support.waiting import wait_until

AGENTBUS = str(Path(sys.executable).with_name("agentbus"))
DEADLINE = 20.0
BEAT = 1.0  # the agents' heartbeat: a test process busy with clients beats late


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


class Gated(Agent):
    """One skill that runs until the test opens its gate."""

    name = "gated"
    description = "Waits for the test"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.senders: list[str] = []

    @skill
    async def wait(self, label: str) -> str:
        """Return ``label`` once the gate opens."""
        self.senders.append(current_request().sender_id)
        await self.gate.wait()
        return label


@contextlib.asynccontextmanager
async def gateway(
    team: Team, keys: Path, redis_url: str, *options: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """An ``agentbus gateway`` process on the team's bus, sharing tasks in Redis: its URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "--log-level", "warning", "gateway", "--keys", str(keys), "--port", str(port),
        "--task-store", redis_url, *options,
        env={**os.environ, "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5", **(env or {})},
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        status = await process.wait()
        assert status == 0, f"the gateway exited with {status}"


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({KEY: "alice", OTHER_KEY: "bob"}))
    return path


async def test_one_process_runs_a_task_the_other_reads_lists_and_cancels(
    team: Team, keys: Path, redis_url: str
) -> None:
    """A task sent to A is read, listed and cancelled at B; the cancel stops the agent's
    work (A's bus request), and A reads the task back cancelled. Bob sees none of it."""
    calc = await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=BEAT))
    assert isinstance(calc, Calc)
    async with (
        gateway(team, keys, redis_url) as a,
        gateway(team, keys, redis_url) as b,
    ):
        await asyncio.gather(wait_listed(a, "calc"), wait_listed(b, "calc"))
        async with (
            sdk_client(f"{a}/agents/calc", KEY) as at_a,
            sdk_client(f"{b}/agents/calc", KEY) as at_b,
            sdk_client(f"{b}/agents/calc", OTHER_KEY) as bob_at_b,
        ):
            (sent,) = await send(
                at_a, user_message({"seconds": 60}, skill="slow"), return_immediately=True
            )
            task_id = sent.task.id
            await wait_until(lambda: calc.in_flight == 1, DEADLINE)
            read = await at_b.get_task(a2a.GetTaskRequest(id=task_id))
            assert state_name(read.status.state) == "TASK_STATE_WORKING"
            listed = await at_b.list_tasks(a2a.ListTasksRequest())
            assert task_id in [task.id for task in listed.tasks]
            with pytest.raises(TaskNotFoundError):
                await bob_at_b.get_task(a2a.GetTaskRequest(id=task_id))

            cancelled = await at_b.cancel_task(a2a.CancelTaskRequest(id=task_id))
            assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
            await wait_until(lambda: calc.ended == ["cancelled"], DEADLINE)
            back = await at_a.get_task(a2a.GetTaskRequest(id=task_id))
        assert state_name(back.status.state) == "TASK_STATE_CANCELED"
        assert calc.in_flight == 0


async def test_a_subscription_at_the_other_process_follows_the_task_to_its_end(
    team: Team, keys: Path, redis_url: str
) -> None:
    """SubscribeToTask at B, for a task A runs: the task as it is, then its artifact and
    its completion as A records them."""
    gated = await team.add(
        Gated(agent_id="gated-1", settings=team.settings, heartbeat_interval=BEAT)
    )
    assert isinstance(gated, Gated)
    async with (
        gateway(team, keys, redis_url) as a,
        gateway(team, keys, redis_url) as b,
    ):
        await asyncio.gather(wait_listed(a, "gated"), wait_listed(b, "gated"))
        async with (
            sdk_client(f"{a}/agents/gated", KEY) as at_a,
            sdk_client(f"{b}/agents/gated", KEY, streaming=True) as at_b,
        ):
            (sent,) = await send(at_a, user_message({"label": "done"}), return_immediately=True)
            task_id = sent.task.id
            events = []
            subscription = at_b.subscribe(a2a.SubscribeToTaskRequest(id=task_id))
            async with contextlib.aclosing(subscription):
                async for event in subscription:
                    events.append(event)
                    if len(events) == 1:
                        assert event.task.id == task_id  # the task as it is: now it ends
                        gated.gate.set()
        kinds = [event.WhichOneof("payload") for event in events]
        assert kinds[0] == "task"
        assert "artifact_update" in kinds
        artifact = next(e.artifact_update for e in events if e.HasField("artifact_update"))
        assert artifact.artifact.parts[0].text == "done"
        last = events[-1]
        assert state_name(last.status_update.status.state) == "TASK_STATE_COMPLETED"


async def test_a_question_asked_through_one_process_is_answered_through_the_other(
    team: Team, keys: Path, redis_url: str
) -> None:
    """The task waits at A; the follow-ups at B answer it (the question read from Redis),
    and the webhook registered at A hears the question and the end from whichever runs."""
    await team.add(Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=BEAT))
    pushing = {
        "AGENTBUS_GATEWAY_PUSH_PRIVATE_HOSTS": "true",
        "AGENTBUS_GATEWAY_PUSH_BACKOFF": "0.05",
    }
    async with (
        serving_webhook(refuse=1) as webhook,
        gateway(team, keys, redis_url, env=pushing) as a,
        gateway(team, keys, redis_url, env=pushing) as b,
    ):
        await asyncio.gather(wait_listed(a, "clerk"), wait_listed(b, "clerk"))
        async with (
            sdk_client(f"{a}/agents/clerk", KEY) as at_a,
            sdk_client(f"{b}/agents/clerk", KEY) as at_b,
        ):
            message = user_message({"who": "ann"}, skill="book")
            [sent_at_a] = [r async for r in at_a.send_message(sent(message, webhook.url))]
            task = sent_at_a.task
            await wait_until(lambda: "TASK_STATE_INPUT_REQUIRED" in webhook.states(), DEADLINE)
            for text in ("Oslo", "4"):
                follow_up = user_message(text=text)
                follow_up.task_id = task.id
                (answered,) = await send(at_b, follow_up)
            await wait_until(lambda: webhook.states()[-1:] == ["TASK_STATE_COMPLETED"], DEADLINE)
            back = await at_a.get_task(a2a.GetTaskRequest(id=task.id))
    assert state_name(answered.task.status.state) == "TASK_STATE_COMPLETED"
    assert answered.task.artifacts[0].parts[0].text.startswith("booked 4 nights in Oslo for ann")
    assert state_name(back.status.state) == "TASK_STATE_COMPLETED"
    assert webhook.states().count("TASK_STATE_INPUT_REQUIRED") == 2


async def test_workers_behind_one_address_serve_one_set_of_tasks(
    team: Team, keys: Path, redis_url: str
) -> None:
    """``--workers 2``: calls on many connections reach both processes (two bus senders),
    and every task is read back through the one address, whichever process answers."""
    calc = await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=BEAT))
    assert isinstance(calc, Calc)
    async with gateway(team, keys, redis_url, "--workers", "2") as url:
        await wait_listed(url, "calc")
        headers = {"Authorization": f"Bearer {KEY}", "A2A-Version": "1.0"}
        task_ids: list[str] = []

        async def call(n: int) -> None:
            # A connection of its own: the kernel hands each to one of the processes.
            async with httpx.AsyncClient(headers=headers, timeout=30) as http:
                reply = await http.post(f"{url}/agents/calc/", json=_send(n))
            task = reply.json()["result"]["task"]
            assert task["artifacts"][0]["parts"][0]["data"] == 2 * n
            task_ids.append(task["id"])

        async def both_served() -> None:
            n = 0
            while len({sender for _, sender in calc.seen}) < 2:
                await asyncio.gather(*(call(n + k) for k in range(16)))
                n += 16

        await asyncio.wait_for(both_served(), DEADLINE)

        async def read(task_id: str) -> str:
            async with httpx.AsyncClient(headers=headers, timeout=30) as http:
                body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
                reply = await http.post(f"{url}/agents/calc/", json=body)
            answer = reply.json()
            assert "result" in answer, answer
            state: str = answer["result"]["status"]["state"]
            return state

        states = await asyncio.gather(*(read(task_id) for task_id in task_ids))
        assert set(states) == {"TASK_STATE_COMPLETED"}


def _send(n: int) -> dict[str, Any]:
    message = {"messageId": f"m-{os.urandom(8).hex()}", "role": "ROLE_USER",
               "parts": [{"data": {"n": n}}], "metadata": {"skill": "double"}}  # fmt: skip
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


async def test_workers_need_a_task_store_and_the_store_must_answer(team: Team, keys: Path) -> None:
    """``--workers 2`` alone, and a task store nobody serves: a one-line error, status 2."""
    common = ["--url", team.settings.url, "--exchange", team.settings.exchange, "gateway"]
    common += ["--keys", str(keys), "--port", str(free_port())]
    alone = await asyncio.create_subprocess_exec(
        AGENTBUS, *common, "--workers", "2", stderr=asyncio.subprocess.PIPE
    )
    _, alone_err = await alone.communicate()
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    unreachable = await asyncio.create_subprocess_exec(
        AGENTBUS, *common, "--task-store", nobody, stderr=asyncio.subprocess.PIPE
    )
    _, unreachable_err = await unreachable.communicate()
    workers = await asyncio.create_subprocess_exec(
        AGENTBUS, *common, "--task-store", nobody, "--workers", "2", stderr=asyncio.subprocess.PIPE
    )
    _, workers_err = await workers.communicate()
    assert (workers.returncode, "cannot be reached" in workers_err.decode()) == (2, True)
    assert alone.returncode == 2
    assert "--workers over 1 needs --task-store" in alone_err.decode()
    assert unreachable.returncode == 2
    assert "cannot be reached" in unreachable_err.decode()
    assert "Traceback" not in unreachable_err.decode()
