"""deploy/rabbitmq/definitions.json imports into a real RabbitMQ node and agrees with the bus.

The definitions are imported with ``rabbitmqctl import_definitions`` into a private node
(agentbus.testing.chaos.PrivateBroker: its own name, ports and data; never the shared broker),
read back with ``rabbitmqctl``, and then a bus with quorum service queues serves and
answers on them: had the definitions declared a queue differently from the bus, the bus's
declaration would be refused (PRECONDITION_FAILED).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_support import DEPLOY, timed

import agentbus
from agentbus import Settings
from agentbus.bus import Topology
from agentbus.envelopes import RequestEnvelope
from agentbus.testing.chaos import PrivateBroker, find_rabbitmq
from support.required import missing
from support.waiting import eventually

DEFINITIONS = DEPLOY / "rabbitmq" / "definitions.json"
SERVICES = ("registry", "leader", "files", "code", "text", "report")
TOPOLOGY = Topology("agentbus")


def _definitions() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DEFINITIONS.read_text(encoding="utf-8"))
    return loaded


def _rows(output: str) -> list[list[str]]:
    """The rows of a ``rabbitmqctl -q list_*`` table, its header left out."""
    lines = [line for line in output.splitlines() if line.strip()]
    return [line.split("\t") for line in lines[1:]]


@pytest.fixture(scope="module")
def node() -> Iterator[PrivateBroker]:
    """A private RabbitMQ node with the definitions imported."""
    if find_rabbitmq() is None:
        missing("rabbitmq-server is not installed: no private node to import definitions into")
    broker = PrivateBroker("agentbus-deploy")
    try:
        with timed("private node start + import_definitions"):
            broker.start()
            broker.rabbitmqctl("import_definitions", str(DEFINITIONS))
        yield broker
    finally:
        broker.stop()


def test_definitions_name_the_bus_topology() -> None:
    """The exchanges, queues and bindings are the ones agentbus derives from `agentbus`."""
    defs = _definitions()
    exchanges = {(e["name"], e["type"]) for e in defs["exchanges"]}
    assert exchanges == {(TOPOLOGY.exchange, "topic"), (TOPOLOGY.dead_letter_exchange, "fanout")}
    queues = {q["name"] for q in defs["queues"]}
    assert queues == {
        TOPOLOGY.dead_letter_queue,
        TOPOLOGY.audit_stream,
        TOPOLOGY.lease_queue("schedules"),
    } | {TOPOLOGY.service_queue(s) for s in SERVICES}
    bindings = {(b["source"], b["destination"], b["routing_key"]) for b in defs["bindings"]}
    expected = {(TOPOLOGY.dead_letter_exchange, TOPOLOGY.dead_letter_queue, "")}
    expected |= {
        (TOPOLOGY.exchange, TOPOLOGY.service_queue(s), f"agent.{s}.{kind}")
        for s in SERVICES
        for kind in ("request", "event")
    }
    assert bindings == expected


def test_import_creates_quorum_queues_under_the_policies(node: PrivateBroker) -> None:
    """After the import the node has the service queues as quorum queues, with policies."""
    rows = _rows(node.rabbitmqctl("list_queues", "name", "type", "policy", "durable"))
    queues = {name: (kind, policy, durable) for name, kind, policy, durable in rows}
    for service in SERVICES:
        assert queues[TOPOLOGY.service_queue(service)] == ("quorum", "agentbus-services", "true")
    assert queues[TOPOLOGY.dead_letter_queue] == ("quorum", "agentbus-dead-letter", "true")

    policies = {row[1]: row for row in _rows(node.rabbitmqctl("list_policies"))}
    services = json.loads(policies["agentbus-services"][4])
    # The larger of the two limits: a queue keeps the lower of its own and its policy's.
    assert services["delivery-limit"] == Settings().plan_delivery_limit
    assert services["dead-letter-exchange"] == TOPOLOGY.dead_letter_exchange
    assert services["dead-letter-strategy"] == "at-least-once"

    exchanges = dict(_rows(node.rabbitmqctl("list_exchanges", "name", "type")))
    assert exchanges[TOPOLOGY.exchange] == "topic"
    assert exchanges[TOPOLOGY.dead_letter_exchange] == "fanout"
    bindings = _rows(node.rabbitmqctl("list_bindings", "source_name", "destination_name"))
    assert [TOPOLOGY.exchange, TOPOLOGY.service_queue("text")] in bindings

    # What the agents declare: a service's own limit, the leaders' for plans.
    listed = _rows(node.rabbitmqctl("list_queues", "name", "arguments"))
    arguments = {row[0]: row[1] for row in listed}
    leader = arguments[TOPOLOGY.service_queue("leader")]
    assert '{"x-delivery-limit",20}' in leader
    assert '{"x-delivery-limit",5}' in arguments[TOPOLOGY.service_queue("text")]


async def test_a_quorum_bus_serves_on_the_imported_queues(node: PrivateBroker) -> None:
    """A bus set to quorum queues declares the imported ones as they are, and answers."""
    settings = Settings(url=node.url, exchange="agentbus", queue_type="quorum", delivery_limit=5)

    async def handler(request: RequestEnvelope) -> dict[str, Any]:
        return {"echo": request.payload.parameters}

    async with agentbus.Bus(settings, agent_id="text-1") as server:
        await server.serve(handler, service="text")
        async with agentbus.Bus(settings, agent_id="client-1") as client:
            reply = await asyncio.wait_for(
                client.request("text", "echo", {"n": 1}, timeout=10), timeout=15
            )
            # The leaders' schedules lease, as a leader asks for it, on the imported queue.
            lease = await client.lease("schedules")
            await asyncio.wait_for(lease.acquired(), timeout=15)
            await lease.aclose()
    assert reply.result == {"echo": {"n": 1}}
    ours_gone = [TOPOLOGY.service_queue("text"), "quorum", "0"]  # still quorum, no consumer

    def listed() -> list[list[str]] | None:
        rows = _rows(node.rabbitmqctl("list_queues", "name", "type", "consumers"))
        return rows if ours_gone in rows else None

    # A quorum queue counts a closed consumer out a moment later (one still counted under
    # three test workers): looked at once a second, each look an Erlang VM.
    await eventually(listed, 30, "the service queue, quorum, without our consumer", interval=1.0)


async def test_the_compose_broker_config_loads_the_definitions_at_boot(tmp_path: Path) -> None:
    """rabbitmq.conf as compose mounts it: queues and policies at boot, guest can connect.

    A node that loads definitions at boot creates no default user, so compose-users.json
    brings the demo's; without it the team could not log in.
    """
    if find_rabbitmq() is None:
        missing("rabbitmq-server is not installed: no private node to boot")
    mounted = tmp_path / "definitions.d"  # what compose mounts at /etc/rabbitmq/definitions.d
    mounted.mkdir()
    for name in ("definitions.json", "compose-users.json"):
        shutil.copy(DEPLOY / "rabbitmq" / name, mounted / name)
    config = {}
    for line in (DEPLOY / "rabbitmq" / "rabbitmq.conf").read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    assert config.pop("load_definitions") == "/etc/rabbitmq/definitions.d"
    broker = PrivateBroker(
        "agentbus-deploy-boot", config={**config, "load_definitions": str(mounted)}
    )
    try:
        with timed("private node boot with the compose config"):
            await asyncio.to_thread(broker.start)
        rows = _rows(broker.rabbitmqctl("list_queues", "name", "type", "policy"))
        assert [TOPOLOGY.service_queue("code"), "quorum", "agentbus-services"] in rows
        settings = Settings(url=broker.url, exchange="agentbus", queue_type="quorum")
        async with agentbus.Bus(settings, agent_id="client-boot") as client:  # guest logs in
            assert client.agent_id == "client-boot"
    finally:
        await asyncio.to_thread(broker.stop)
