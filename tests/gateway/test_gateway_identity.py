"""HTTP callers as broker users: with verify_sender, a key's requests carry its own user.

On a private RabbitMQ node (the chaos kit's): the agents refuse any message whose AMQP
user_id does not own its sender_id, so a request reaches a skill only when the key's
identity logs in to the broker as itself.
"""

from __future__ import annotations

import secrets
import uuid

import pytest
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, OTHER_KEY, Team

from agentbus import Bus, Settings
from agentbus.gateway import ApiKeys
from agentbus.registry import Registry
from agentbus.testing.chaos import PrivateBroker
from support.broker import delete_topology
from support.waiting import wait_until

pytestmark = pytest.mark.chaos


async def test_a_keys_identity_speaks_as_its_own_broker_user(private_broker: PrivateBroker) -> None:
    """alice's key has alice's broker URL: calc serves her; mallory has none: unauthorized."""
    alice = f"alice{secrets.token_hex(3)}"
    alice_url = private_broker.add_user(alice, secrets.token_hex(8))
    exchange = f"test-gw-id-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        url=private_broker.url, exchange=exchange, verify_sender=True, instance_queue_expires=30
    )
    team = Team(settings, await Bus(settings, agent_id="guest-client").open())
    try:
        await team.add(
            Registry(agent_id="guest-registry", settings=settings, heartbeat_interval=HEARTBEAT)
        )
        calc = Calc(agent_id="guest-calc", settings=settings, heartbeat_interval=HEARTBEAT)
        await team.add(calc)
        keys = ApiKeys.from_mapping(
            {KEY: {"identity": alice, "url": alice_url}, OTHER_KEY: "mallory"}
        )
        gateway = await team.serve(keys)
        await wait_until(lambda: "calc" in gateway.directory.cards, 15)
        async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
            (response,) = await send(client, user_message({"n": 6}, skill="double"))
        assert data_of(response.task.artifacts[0].parts[0]) == 12
        async with sdk_client(f"{team.url}/agents/calc", OTHER_KEY) as client:
            (refused,) = await send(client, user_message({"n": 6}, skill="double"))
        assert state_name(refused.task.status.state) == "TASK_STATE_FAILED"
        assert data_of(refused.task.status.message.parts[1])["code"] == "unauthorized"
        assert [sender.startswith(f"{alice}-") for _, sender in calc.seen] == [True]
    finally:
        await team.aclose()
        await delete_topology(private_broker.url, exchange, team.queues)
        private_broker.delete_user(alice)
