"""A conversation across two A2A hops: an a2a-sdk client -> ``agentbus gateway`` -> the bus ->
``agentbus run-a2a`` -> a remote a2a-sdk agent that asks.

Every part is a process of its own (a registry, the remote agent, run-a2a, the gateway),
sharing nothing but the broker. The remote agent asks which city, then how many nights
(with a JSON Schema); the client sees each question as input-required on its one task,
answers on that task, and gets the result.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_team import KEY
from test_gateway_cli import AGENTBUS, wait_listed

from agentbus.bus import Topology
from support.broker import delete_topology
from support.ports import free_port

REMOTE = Path(__file__).with_name("remote_a2a_server.py")
SERVICE = "Word-smith"  # run-a2a names it after the remote card's name, "Word smith"


@pytest.fixture
async def processes(broker_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """A registry, the remote agent, run-a2a and a gateway; yield the gateway's URL."""
    exchange = f"test-gw-conv-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AGENTBUS_URL": broker_url,
        "AGENTBUS_EXCHANGE": exchange,
        "AGENTBUS_LOG_LEVEL": "warning",
        "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5",
    }
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    remote_port, gateway_port = free_port(), free_port()
    commands = [
        [AGENTBUS, "registry", "--id", "registry-1"],
        [sys.executable, str(REMOTE), str(remote_port)],
        [AGENTBUS, "run-a2a", f"http://127.0.0.1:{remote_port}/", "--id", "words-1"],
        [AGENTBUS, "gateway", "--keys", str(keys), "--port", str(gateway_port)],
    ]
    started = []
    try:
        for command in commands:
            started.append(await asyncio.create_subprocess_exec(*command, env=env))
        url = f"http://127.0.0.1:{gateway_port}"
        await wait_listed(url, SERVICE)
        yield url
    finally:
        for process in started:
            if process.returncode is None:
                process.terminate()
        codes = [await process.wait() for process in started]
        topology = Topology(exchange)
        queues = {topology.service_queue(s) for s in ("registry", SERVICE)}
        queues.add(topology.conversations(SERVICE))
        await delete_topology(broker_url, exchange, queues)
    # agentbus's commands exit 0 on SIGTERM; uvicorn.run re-raises the signal it took.
    assert codes[:1] + codes[2:] == [0] * (len(started) - 1)


def follow_up(task: a2a.Task, text: str) -> a2a.Message:
    """The answer ``text`` as a message on ``task``."""
    message = user_message(text=text)
    message.task_id = task.id
    message.context_id = task.context_id
    return message


async def test_an_a2a_client_answers_a_remote_a2a_agents_questions_across_the_bus(
    processes: str,
) -> None:
    """Input-required twice (the second with the remote agent's schema), answered on the
    same task each time; then completed with the remote agent's result."""
    async with sdk_client(f"{processes}/agents/{SERVICE}", KEY) as client:
        (response,) = await send(client, user_message(text="ann", skill="trip"))
        task = response.task
        assert state_name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
        assert task.status.message.parts[0].text == "Which city?"

        (response,) = await send(client, follow_up(task, "Oslo"))
        asked = response.task
        assert asked.id == task.id
        assert state_name(asked.status.state) == "TASK_STATE_INPUT_REQUIRED"
        assert asked.status.message.parts[0].text == "How many nights in Oslo?"
        question = data_of(asked.status.message.parts[1])["question"]
        assert question["answer_schema"] == {"type": "integer", "minimum": 1, "maximum": 30}

        (response,) = await send(client, follow_up(task, "3"))
    done = response.task
    assert (done.id, state_name(done.status.state)) == (task.id, "TASK_STATE_COMPLETED")
    assert done.artifacts[0].parts[0].text == "ann: 3 nights in Oslo"
