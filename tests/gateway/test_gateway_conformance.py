"""A2A 1.0 conformance of the gateway where the SDK alone falls short (issue 28's findings).

ListTasks refuses a status filter that is no task state; an anonymous gateway's card asks
for no credentials; a 0.3 method sent as A2A 1.0 is "version not supported"; one service can
be served at the root, where a client discovering an agent by its host looks.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, Team

from agentbus.gateway import ApiKeys, RemoteA2AAgent
from agentbus.gateway._checks import rpc_refusal
from support.waiting import wait_until

DEADLINE = 15.0
AUTH = {"Authorization": f"Bearer {KEY}", "A2A-Version": "1.0"}
BINDINGS = ["JSONRPC", "HTTP+JSON"]


async def calc_gateway(team: Team, **options: object) -> Calc:
    """Start calc and a gateway (``options`` for it); wait until the gateway serves calc."""
    calc = Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(calc)
    gateway = await team.serve(**options)
    await wait_until(lambda: "calc" in gateway.directory.cards, DEADLINE)
    return calc


def rpc(method: str, params: dict[str, object], request_id: int = 1) -> dict[str, object]:
    """A JSON-RPC 2.0 request object."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_refuses_a_status_that_is_no_task_state(team: Team, binding: str) -> None:
    """An unknown status filter is invalid params, not "no filter"; a valid one still filters."""
    await calc_gateway(team)
    url = f"{team.url}/agents/calc"
    async with sdk_client(url, KEY, binding=binding) as client:
        (response,) = await send(client, user_message({"n": 2}, skill="double"))
        done = response.task
        with pytest.raises(InvalidParamsError, match="is not a task state"):
            await client.list_tasks(a2a.ListTasksRequest(status=99))  # type: ignore[arg-type]
        completed = await client.list_tasks(
            a2a.ListTasksRequest(status=a2a.TaskState.TASK_STATE_COMPLETED)
        )
        working = await client.list_tasks(
            a2a.ListTasksRequest(status=a2a.TaskState.TASK_STATE_WORKING)
        )
    assert [task.id for task in completed.tasks] == [done.id]
    assert list(working.tasks) == []
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        if binding == "JSONRPC":
            answer = await http.post(f"{url}/", json=rpc("ListTasks", {"status": "INVALID"}))
            assert answer.status_code == 200
            assert answer.json()["id"] == 1
            assert answer.json()["error"]["code"] == -32602
            assert "'INVALID' is not a task state" in answer.json()["error"]["message"]
        else:
            answer = await http.get(f"{url}/rest/tasks", params={"status": "INVALID"})
            assert answer.status_code == 400
            assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
            assert "'INVALID' is not a task state" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("status", "refused"),
    [
        ("TASK_STATE_WORKING", False),
        ("TASK_STATE_UNSPECIFIED", False),  # the proto's "no filter"
        (None, False),
        (3, False),
        ("3", False),
        ("working", True),
        (99, True),
        ("99", True),
        (True, True),
        ({"state": "TASK_STATE_WORKING"}, True),
    ],
)
def test_which_list_tasks_status_filters_are_refused(status: object, refused: bool) -> None:
    """Names and numbers of TaskState pass; anything else is InvalidParamsError."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": status}}
    refusal = rpc_refusal(body, "1.0")
    assert isinstance(refusal, InvalidParamsError) if refused else refusal is None


async def test_an_anonymous_gateways_card_requires_no_credentials(team: Team) -> None:
    """With --anonymous the card declares no scheme and no requirement; calls need no key."""
    await calc_gateway(team, keys=ApiKeys({}, allow_anonymous=True), allow_anonymous=True)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, f"{team.url}/agents/calc").get_agent_card()
        raw = (await http.get(f"{team.url}/agents/calc/.well-known/agent-card.json")).json()
    assert dict(card.security_schemes) == {}
    assert list(card.security_requirements) == []
    assert "securitySchemes" not in raw
    assert "securityRequirements" not in raw
    async with sdk_client(f"{team.url}/agents/calc", None) as client:
        (response,) = await send(client, user_message({"n": 5}, skill="double"))
    assert data_of(response.task.artifacts[0].parts[0]) == 10


async def test_a_keyed_gateways_card_requires_the_bearer_scheme(team: Team) -> None:
    """With keys the card declares the bearer scheme and requires it."""
    await calc_gateway(team)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, f"{team.url}/agents/calc").get_agent_card()
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [list(requirement.schemes) for requirement in card.security_requirements] == [["bearer"]]


async def test_a_0_3_method_sent_as_a2a_1_0_is_version_not_supported(team: Team) -> None:
    """message/send with A2A-Version: 1.0 is -32009; without the header (0.3) it runs."""
    calc = await calc_gateway(team)
    endpoint = f"{team.url}/agents/calc/"
    legacy = {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "user",
            "kind": "message",
            "parts": [{"kind": "data", "data": {"n": 4}}],
            "metadata": {"skill": "double"},
        }
    }
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
        refused = await http.post(
            endpoint, json=rpc("message/send", legacy, 7), headers={"A2A-Version": "1.0"}
        )
        also_refused = await http.post(
            endpoint, json=rpc("tasks/get", {"id": "x"}, 8), headers={"A2A-Version": "1.0"}
        )
        assert calc.seen == []
        as_0_3 = await http.post(
            endpoint, json=rpc("message/send", legacy, 9), headers={"A2A-Version": "0.3"}
        )
        no_header = await http.post(endpoint, json=rpc("message/send", legacy, 10))
    assert refused.json()["id"] == 7
    assert refused.json()["error"]["code"] == -32009
    assert "A2A 0.3 method" in refused.json()["error"]["message"]
    assert also_refused.json()["error"]["code"] == -32009
    assert as_0_3.json()["result"]["status"]["state"] == "completed"
    assert no_header.json()["result"]["status"]["state"] == "completed"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_root_service_is_found_by_its_host(team: Team, binding: str) -> None:
    """root_service: its card at /.well-known/agent-card.json, calls at the root's URLs."""
    await calc_gateway(team, root_service="calc")
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, team.url).get_agent_card()
        served = await A2ACardResolver(http, f"{team.url}/agents/calc").get_agent_card()
        listing = (await http.get(f"{team.url}/agents")).json()
    assert card.name == "calc"
    interfaces = [(i.protocol_binding, i.url) for i in card.supported_interfaces]
    assert interfaces == [("JSONRPC", f"{team.url}/"), ("HTTP+JSON", team.url)]
    assert served.supported_interfaces[0].url == f"{team.url}/agents/calc/"
    assert {agent["name"] for agent in listing["agents"]} == {"calc", "registry"}
    async with sdk_client(team.url, KEY, binding=binding) as client:
        (response,) = await send(client, user_message({"n": 21}, skill="double"))
        task = response.task
        again = await client.get_task(a2a.GetTaskRequest(id=task.id))
    assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
    assert data_of(again.artifacts[0].parts[0]) == 42


async def test_run_a2a_finds_the_root_service_by_host_and_the_root_follows_it(
    team: Team,
) -> None:
    """A run-a2a agent given only the host calls the root service; gone, the root is 404."""
    calc = await calc_gateway(team, root_service="calc")
    remote = await RemoteA2AAgent.from_url(
        team.url,
        service="calc-by-host",
        key=KEY,
        agent_id="calc-by-host-1",
        settings=team.settings,
        heartbeat_interval=HEARTBEAT,
    )
    await team.add(remote)
    reply = await team.client.request("calc-by-host", "double", {"n": 8}, timeout=10)
    assert reply.result == 16
    assert [skill for skill, _ in calc.seen] == ["double"]

    await team.remove("calc-by-host-1")
    await team.remove("calc-1")
    await wait_until(lambda: "calc" not in team.gateway.directory.cards, DEADLINE)  # type: ignore[union-attr]
    async with httpx.AsyncClient(headers=AUTH) as http:
        card = await http.get(f"{team.url}/.well-known/agent-card.json")
        call = await http.post(f"{team.url}/", json=rpc("GetTask", {"id": "x"}))
    assert card.status_code == 404
    assert call.status_code == 404
    assert call.json()["error"]["message"] == "no agent 'calc' on this gateway"
