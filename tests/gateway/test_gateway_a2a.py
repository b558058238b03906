"""The A2A gateway on the real broker, called with the official a2a-sdk client.

Each test runs a registry and agents in this process on its own exchange, serves a
gateway with uvicorn on a free port and talks to it over HTTP as a foreign client would.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.errors import AgentCardResolutionError
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError, InvalidRequestError, UnsupportedOperationError
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc, Counter, Shouter
from gateway_team import HEARTBEAT, KEY, OTHER_KEY, Team

from agentbus.gateway import SCHEMAS_EXTENSION
from support.waiting import wait_until

DEADLINE = 15.0


async def calc_team(team: Team, **options: object) -> Calc:
    """Start a Calc agent and a gateway; wait until the gateway serves calc."""
    calc = Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(calc)
    gateway = await team.serve(**options)
    await wait_until(lambda: "calc" in gateway.directory.cards, DEADLINE)
    return calc


async def listed(team: Team) -> set[str]:
    """Names of the agents the gateway lists at /agents."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{team.url}/agents")
    response.raise_for_status()
    return {card["name"] for card in response.json()["agents"]}


async def test_cards_follow_the_registry_as_agents_join_and_leave(team: Team) -> None:
    """A card per live service at its well-known path; joiners appear, leavers go (404)."""
    await calc_team(team)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, f"{team.url}/agents/calc").get_agent_card()
    assert (card.name, card.version) == ("calc", "2.1.0")
    assert {skill.id for skill in card.skills} == {"double", "slow", "steps", "fail"}
    assert card.capabilities.streaming
    interfaces = [(i.protocol_binding, i.url) for i in card.supported_interfaces]
    assert interfaces == [
        ("JSONRPC", f"{team.url}/agents/calc/"),
        ("HTTP+JSON", f"{team.url}/agents/calc/rest"),
    ]
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    (extension,) = [e for e in card.capabilities.extensions if e.uri == SCHEMAS_EXTENSION]
    schema = dict(extension.params["double"]["parameters"])
    assert schema["required"] == ["n"]
    assert await listed(team) == {"calc", "registry"}

    await team.add(
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await wait_until(lambda: "shouter" in team.gateway.directory.cards, DEADLINE)  # type: ignore[union-attr]
    assert await listed(team) == {"calc", "registry", "shouter"}

    await team.remove("calc-1")
    await wait_until(lambda: "calc" not in team.gateway.directory.cards, DEADLINE)  # type: ignore[union-attr]
    assert await listed(team) == {"registry", "shouter"}
    async with httpx.AsyncClient() as http:
        with pytest.raises(AgentCardResolutionError):
            await A2ACardResolver(http, f"{team.url}/agents/calc").get_agent_card()


async def test_a_data_part_is_the_parameters_and_the_result_an_artifact(team: Team) -> None:
    """message/send with a data part runs the skill as the caller; the task reads back."""
    calc = await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (response,) = await send(client, user_message({"n": 21}, skill="double"))
        task = response.task
        assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
        assert data_of(task.artifacts[0].parts[0]) == 42
        again = await client.get_task(a2a.GetTaskRequest(id=task.id))
        follow_up = user_message({"n": 1}, skill="double")
        follow_up.task_id = task.id
        with pytest.raises(UnsupportedOperationError, match="it asks none now"):
            await send(client, follow_up)
    assert state_name(again.status.state) == "TASK_STATE_COMPLETED"
    assert data_of(again.artifacts[0].parts[0]) == 42
    # The request went out under the key's identity, not the gateway's.
    assert [(skill, sender.split("-")[0]) for skill, sender in calc.seen] == [("double", "alice")]
    assert len(team.gateway.open_tasks) == 0  # type: ignore[union-attr]


async def test_a_text_part_fills_the_one_string_parameter(team: Team) -> None:
    """The agent's only skill is chosen; a text part fills its one required string parameter."""
    for agent in (
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Counter(agent_id="counter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"shouter", "counter"} <= set(gateway.directory.cards), DEADLINE)
    async with sdk_client(f"{team.url}/agents/shouter", KEY) as client:
        (response,) = await send(client, user_message(text="hello bus"))
    assert response.task.artifacts[0].parts[0].text == "HELLO BUS"
    async with sdk_client(f"{team.url}/agents/counter", KEY) as client:  # count(text, shortest=1)
        (response,) = await send(client, user_message(text="a bus of agents"))
    assert data_of(response.task.artifacts[0].parts[0]) == {"words": 4}


async def test_text_for_a_skill_without_one_string_parameter_is_refused(team: Team) -> None:
    """Text to double(n: int) is an invalid-params error naming the schema; no request sent."""
    calc = await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        with pytest.raises(InvalidParamsError, match="do not fit its schema") as caught:
            await send(client, user_message(text="twenty-one", skill="double"))
        with pytest.raises(InvalidParamsError, match="n: 'x' is not of type 'integer'"):
            await send(client, user_message({"n": "x"}, skill="double"))
        with pytest.raises(InvalidParamsError, match="several skills"):
            await send(client, user_message({"n": 1}))
        with pytest.raises(InvalidParamsError, match="no skill 'triple'"):
            await send(client, user_message({"n": 1}, skill="triple"))
    assert "integer" in str(caught.value.data)
    assert calc.seen == []
    assert len(team.gateway.open_tasks) == 0  # type: ignore[union-attr]


async def test_streaming_reports_progress_then_the_artifact(team: Team) -> None:
    """SendStreamingMessage: submitted, working, the agent's in_progress notice, artifact, done."""
    await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY, streaming=True) as client:
        events = await send(client, user_message({"seconds": 0.8}, skill="slow"))
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    assert kinds[-2:] == ["artifact_update", "status_update"]
    notices = [
        data_of(event.status_update.status.message.parts[0])
        for event in events
        if event.HasField("status_update") and event.status_update.status.message.parts
    ]
    assert {"in_progress": {"agent_id": "calc-1", "state": "started"}} in notices
    assert events[-2].artifact_update.artifact.parts[0].text == "slept 0.8s"
    assert state_name(events[-1].status_update.status.state) == "TASK_STATE_COMPLETED"


async def test_a_skills_progress_reports_stream_as_working_updates(team: Team) -> None:
    """report_progress in a skill: a working update each, data and text, in order."""
    await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY, streaming=True) as client:
        events = await send(client, user_message({"count": 3}, skill="steps"))
    reports = [
        event.status_update.status.message.parts
        for event in events
        if event.HasField("status_update") and len(event.status_update.status.message.parts) == 2
    ]
    assert [parts[1].text for parts in reports] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert [data_of(parts[0])["in_progress"]["fraction"] for parts in reports] == [1 / 3, 2 / 3, 1]
    assert data_of(events[-2].artifact_update.artifact.parts[0]) == 3


async def test_cancel_sends_the_bus_cancel_to_the_agent(team: Team) -> None:
    """CancelTask ends the agent's work (a bus cancel), and the task reads back canceled."""
    calc = await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (response,) = await send(
            client, user_message({"seconds": 60}, skill="slow"), return_immediately=True
        )
        task_id = response.task.id
        await wait_until(lambda: calc.in_flight == 1, DEADLINE)
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=task_id))
        assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
        await wait_until(lambda: calc.ended == ["cancelled"], DEADLINE)
        read = await client.get_task(a2a.GetTaskRequest(id=task_id))
    assert state_name(read.status.state) == "TASK_STATE_CANCELED"
    await wait_until(lambda: len(team.gateway.open_tasks) == 0, DEADLINE)  # type: ignore[union-attr]
    assert calc.in_flight == 0


async def test_an_error_envelope_is_a_failed_task_with_the_code(team: Team) -> None:
    """The agent's error code and message come back on the failed task's status message."""
    await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (response,) = await send(client, user_message({"code": "invalid_parameters"}, skill="fail"))
    status = response.task.status
    assert state_name(status.state) == "TASK_STATE_FAILED"
    error = data_of(status.message.parts[1])
    assert error["code"] == "invalid_parameters"
    assert error["message"] == "failed as asked: invalid_parameters"
    assert status.message.parts[0].text.startswith("invalid_parameters: ")


async def test_an_unknown_agent_is_not_found(team: Team) -> None:
    """No card for a service that is not on the bus; a call to it is a 404 JSON-RPC error."""
    await calc_team(team)
    async with httpx.AsyncClient() as http:
        with pytest.raises(AgentCardResolutionError):
            await A2ACardResolver(http, f"{team.url}/agents/nobody").get_agent_card()
        response = await http.post(
            f"{team.url}/agents/nobody/",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert response.status_code == 404
    assert "no agent 'nobody'" in response.json()["error"]["message"]


async def test_a_missing_or_wrong_key_is_401_and_nothing_reaches_the_bus(team: Team) -> None:
    """Without a known bearer key the SDK client gets 401; the agent sees nothing."""
    calc = await calc_team(team)
    for key in (None, "not-a-key-of-this-gateway"):
        async with sdk_client(f"{team.url}/agents/calc", key) as client:
            with pytest.raises(Exception, match="401") as caught:
                await send(client, user_message({"n": 1}, skill="double"))
        assert "Unauthorized" in str(caught.value) or "401" in str(caught.value)
    async with sdk_client(f"{team.url}/agents/calc", OTHER_KEY) as client:
        (response,) = await send(client, user_message({"n": 2}, skill="double"))
    assert data_of(response.task.artifacts[0].parts[0]) == 4
    assert [sender.split("-")[0] for _, sender in calc.seen] == ["bob"]


async def test_tasks_are_owned_by_their_caller(team: Team) -> None:
    """Another key cannot read a task back: task not found."""
    await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (response,) = await send(client, user_message({"n": 3}, skill="double"))
    async with sdk_client(f"{team.url}/agents/calc", OTHER_KEY) as other:
        with pytest.raises(Exception, match=r"[Tt]ask not found"):
            await other.get_task(a2a.GetTaskRequest(id=response.task.id))


async def test_beyond_the_open_task_limit_a_message_is_refused(team: Team) -> None:
    """With one slot, a second task is refused at once; after the first ends, one is taken."""
    calc = await calc_team(team, max_open_tasks=1)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (first,) = await send(
            client, user_message({"seconds": 60}, skill="slow"), return_immediately=True
        )
        await wait_until(lambda: calc.in_flight == 1, DEADLINE)
        with pytest.raises(InvalidRequestError, match="open tasks") as caught:
            await send(client, user_message({"n": 1}, skill="double"))
        assert caught.value.data is None or "limit" in str(caught.value.data)
        await client.cancel_task(a2a.CancelTaskRequest(id=first.task.id))
        await wait_until(lambda: len(team.gateway.open_tasks) == 0, DEADLINE)  # type: ignore[union-attr]
        (second,) = await send(client, user_message({"n": 5}, skill="double"))
    assert data_of(second.task.artifacts[0].parts[0]) == 10
    assert [skill for skill, _ in calc.seen] == ["slow", "double"]


async def test_many_concurrent_tasks_all_complete(team: Team) -> None:
    """Twenty messages at once each get their own completed task."""
    await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        replies = await asyncio.gather(
            *(send(client, user_message({"n": n}, skill="double")) for n in range(20))
        )
    assert sorted(data_of(r[0].task.artifacts[0].parts[0]) for r in replies) == [
        2 * n for n in range(20)
    ]


async def test_the_rest_binding_sends_streams_and_reads_tasks(team: Team) -> None:
    """The SDK client on HTTP+JSON: the same task semantics as JSON-RPC."""
    calc = await calc_team(team)
    url = f"{team.url}/agents/calc"
    async with sdk_client(url, KEY, binding="HTTP+JSON") as client:
        (response,) = await send(client, user_message({"n": 4}, skill="double"))
        assert data_of(response.task.artifacts[0].parts[0]) == 8
        read = await client.get_task(a2a.GetTaskRequest(id=response.task.id))
        assert state_name(read.status.state) == "TASK_STATE_COMPLETED"
        with pytest.raises(InvalidParamsError, match="do not fit its schema"):
            await send(client, user_message({"n": "four"}, skill="double"))
    async with sdk_client(url, KEY, streaming=True, binding="HTTP+JSON") as client:
        events = await send(client, user_message({"seconds": 0.1}, skill="slow"))
    assert state_name(events[-1].status_update.status.state) == "TASK_STATE_COMPLETED"
    assert [skill for skill, _ in calc.seen] == ["double", "slow"]


async def test_closing_the_gateway_cancels_the_work_it_started(team: Team) -> None:
    """A gateway shut down with a task running sends the bus cancel: no orphan work."""
    calc = await calc_team(team)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        await send(client, user_message({"seconds": 60}, skill="slow"), return_immediately=True)
    await wait_until(lambda: calc.in_flight == 1, DEADLINE)
    await team.close_gateway()
    await wait_until(lambda: calc.ended == ["cancelled"], DEADLINE)
    assert calc.in_flight == 0


async def test_a_bus_timeout_is_a_failed_task_with_the_timeout_code(team: Team) -> None:
    """No answer within the request timeout: failed, code timeout; the bus cancel stops the work."""
    calc = await calc_team(team, request_timeout=0.5)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        (response,) = await send(client, user_message({"seconds": 30}, skill="slow"))
    status = response.task.status
    assert state_name(status.state) == "TASK_STATE_FAILED"
    assert data_of(status.message.parts[1])["code"] == "timeout"
    assert len(team.gateway.open_tasks) == 0  # type: ignore[union-attr]
    await wait_until(lambda: calc.ended == ["cancelled"], DEADLINE)
