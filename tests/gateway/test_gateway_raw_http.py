"""The gateway with plain HTTP and JSON, as ``curl`` would call it: protocol errors and a task."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, Team

from support.waiting import wait_until

AUTH = {"Authorization": f"Bearer {KEY}"}


def rpc(method: str, params: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    """A JSON-RPC 2.0 request object."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def send_params(n: Any) -> dict[str, Any]:
    """SendMessage params asking calc to double ``n``."""
    return {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"data": {"n": n}}],
            "metadata": {"skill": "double"},
        }
    }


async def test_protocol_errors_and_a_task_over_plain_http(team: Team) -> None:
    """Bad JSON, a bad request, an unknown method, an oversized body: each its JSON-RPC error."""
    calc = Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(calc)
    gateway = await team.serve(max_body_size=4096)
    await wait_until(lambda: "calc" in gateway.directory.cards, 15)
    endpoint = f"{team.url}/agents/calc/"
    async with httpx.AsyncClient(headers=AUTH | {"A2A-Version": "1.0"}, timeout=30) as http:
        bad_json = await http.post(
            endpoint,
            content=b'{"jsonrpc": "2.0", "id": 1,',
            headers={"Content-Type": "application/json"},
        )
        assert bad_json.json()["error"]["code"] == -32700
        not_rpc = await http.post(endpoint, json={"id": 2, "method": "SendMessage"})
        assert not_rpc.json()["error"]["code"] == -32600
        unknown = await http.post(endpoint, json=rpc("tasks/frobnicate", {}, 3))
        assert unknown.json()["error"]["code"] == -32601
        assert unknown.json()["id"] == 3
        oversized = await http.post(endpoint, json=rpc("SendMessage", send_params("x" * 5000), 4))
        assert oversized.json()["error"]["code"] == -32600
        assert "too large" in oversized.json()["error"]["message"].lower()
        wrong = await http.post(endpoint, json=rpc("SendMessage", send_params("ten"), 5))
        assert wrong.json()["error"]["code"] == -32602
        assert calc.seen == []  # none of those reached the bus

        done = await http.post(endpoint, json=rpc("SendMessage", send_params(8), 6))
        task = done.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"][0]["data"] == 16
        read = await http.post(endpoint, json=rpc("GetTask", {"id": task["id"]}, 7))
        assert read.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        missing = await http.post(endpoint, json=rpc("GetTask", {"id": "no-such-task"}, 8))
        assert missing.json()["error"]["code"] == -32001

        unauthorized = await http.post(
            endpoint, json=rpc("SendMessage", send_params(1), 9), headers={"Authorization": ""}
        )
        assert unauthorized.status_code == 401
        assert unauthorized.headers["www-authenticate"] == "Bearer"
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        # An A2A 0.3 client (no A2A-Version header, message/send, kind-tagged parts).
        legacy = {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "user",
                "kind": "message",
                "parts": [{"kind": "data", "data": {"n": 4}}],
                "metadata": {"skill": "double"},
            }
        }
        old = await http.post(endpoint, json=rpc("message/send", legacy, 10))
        assert old.json()["result"]["status"]["state"] == "completed"
        # 0.3 data parts hold objects: a number comes wrapped.
        assert old.json()["result"]["artifacts"][0]["parts"][0]["data"] == {"value": 8}
    assert [skill for skill, _ in calc.seen] == ["double", "double"]
    assert len(gateway.open_tasks) == 0
