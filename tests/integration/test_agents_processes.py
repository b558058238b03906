"""Agents as separate OS processes on a real RabbitMQ: discovery, liveness, balance, errors, drain.

Every agent runs as its own ``agentbus run`` / ``agentbus registry`` process with a 1 s heartbeat,
its JSON log on standard error captured to a file under ``tmp_path``; the tests talk to the
processes over the bus and through the CLI, as a user would. Timing bounds are the functional
ones ("offline within 3 intervals") plus a fixed slack for a shared, noisy machine.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from processes import INTERVAL, MISSED, SLACK, Processes, poll, since, within

from agentbus import Bus, EventEnvelope
from support.broker import queues_with_prefix

SKILLS = {
    "alpha": ["double", "slow", "spell"],
    "beta": ["shout"],
    "registry": ["find_skill", "get_card", "list_agents", "stats"],
}


class Inbox:
    """Collects events as they arrive, with their monotonic arrival time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, EventEnvelope]] = []

    async def __call__(self, event: EventEnvelope) -> None:
        self.events.append((time.monotonic(), event))

    def about(
        self, agent_id: str, *, sender: str | None = None
    ) -> list[tuple[float, dict[str, Any]]]:
        """Arrival times and data of events about ``agent_id`` (sent by ``sender``, if given)."""
        return [
            (arrived, event.payload.event_data)
            for arrived, event in self.events
            if event.payload.event_data.get("agent_id") == agent_id
            and (sender is None or event.sender_id == sender)
        ]


async def offline_inbox(procs: Processes) -> Inbox:
    """A bus client's inbox of every ``agent_offline`` event."""
    inbox = Inbox()
    client = await procs.client()
    await client.subscribe("broadcast.event.agent_offline", inbox)
    return inbox


async def list_agents(
    client: Bus, registry: str = "registry", *, include_offline: bool = False
) -> dict[str, dict[str, Any]]:
    """Ask a registry (the service, or one instance by id) for its agents, by agent id."""
    parameters = {"include_offline": include_offline}
    reply = await client.request(registry, "list_agents", parameters, timeout=2)
    return {row["agent_id"]: row for row in reply.result}


def knows_all(
    client: Bus, expected: dict[str, str], registry: str = "registry"
) -> Callable[[], Awaitable[dict[str, dict[str, Any]] | None]]:
    """A probe: the listing once it holds exactly ``expected`` (id: service), with skills."""

    async def probe() -> dict[str, dict[str, Any]] | None:
        rows = await list_agents(client, registry)
        services = {agent_id: row["service"] for agent_id, row in rows.items()}
        if services == expected and all(row["skills"] for row in rows.values()):
            return rows
        return None

    return probe


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, list[str]]]:
    return {
        agent_id: (row["service"], row["status"], sorted(row["skills"]))
        for agent_id, row in rows.items()
    }


async def test_agents_lists_every_process_within_one_interval(procs: Processes) -> None:
    """A registry and three agents of two services are all listed within one interval of start."""
    expected = {"registry-1": "registry", "alpha-1": "alpha", "alpha-2": "alpha", "beta-1": "beta"}
    started = [
        procs.registry("registry-1"),
        procs.agent("Alpha", "alpha-1"),
        procs.agent("Alpha", "alpha-2"),
        procs.agent("Beta", "beta-1"),
    ]
    client = await procs.client()
    last_started = max([await process.started() for process in started])

    bound = INTERVAL + SLACK
    rows = await poll(knows_all(client, expected), bound - since(last_started), "all four listed")
    listed_after = since(last_started)
    cli_began = time.monotonic()
    shown = await procs.cli("agents", "--json")
    cli_took = time.monotonic() - cli_began

    print(f"all listed {listed_after:.3f} s after the last 'agent started'; CLI {cli_took:.2f} s")
    assert listed_after <= bound
    assert {agent_id: sorted(row["skills"]) for agent_id, row in rows.items()} == {
        agent_id: SKILLS[service] for agent_id, service in expected.items()
    }
    assert all(row["status"] == "ready" and row["interval"] == INTERVAL for row in rows.values())
    assert shown.returncode == 0, shown.stderr
    cli_rows = json.loads(shown.stdout)
    assert {row["agent_id"]: row["service"] for row in cli_rows} == expected


async def test_killed_agent_goes_offline_within_three_intervals(procs: Processes) -> None:
    """A SIGKILLed agent is offline at the registry, agent_offline broadcast, in 3 intervals."""
    expected = {"registry-1": "registry", "alpha-1": "alpha", "alpha-2": "alpha", "beta-1": "beta"}
    started = [
        procs.registry("registry-1"),
        procs.agent("Alpha", "alpha-1"),
        victim := procs.agent("Alpha", "alpha-2"),
        procs.agent("Beta", "beta-1"),
    ]
    client = await procs.client()
    inbox = await offline_inbox(procs)
    for process in started:
        await process.started()
    await poll(knows_all(client, expected), INTERVAL + SLACK, "all four listed")

    killed = time.monotonic()
    victim.popen.kill()
    bound = MISSED * INTERVAL + SLACK
    await within(
        bound, lambda: bool(inbox.about("alpha-2", sender="registry-1")), "agent_offline alpha-2"
    )

    [(arrived, data)] = inbox.about("alpha-2", sender="registry-1")
    print(f"agent_offline for a killed agent {arrived - killed:.3f} s after SIGKILL")
    assert arrived - killed <= bound
    assert data["reason"] == "timeout"
    rows = await list_agents(client, include_offline=True)
    assert {agent_id: row["status"] for agent_id, row in rows.items()} == {
        "registry-1": "ready",
        "alpha-1": "ready",
        "alpha-2": "offline",
        "beta-1": "ready",
    }
    assert [e.payload.event_data["agent_id"] for _, e in inbox.events] == ["alpha-2"]


async def test_restarted_registry_knows_live_agents_within_one_interval(procs: Processes) -> None:
    """A registry started after the old one stopped knows every live agent within one interval."""
    agents = {"alpha-1": "alpha", "alpha-2": "alpha", "beta-1": "beta", "beta-2": "beta"}
    old = procs.registry("registry-1")
    started = [procs.agent("Alpha", "alpha-1"), procs.agent("Alpha", "alpha-2")]
    started.append(procs.agent("Beta", "beta-1"))
    # Beats only every 60 s: the new registry can know it in time only by its announce.
    started.append(procs.agent("Beta", "beta-2", heartbeat=60))
    client = await procs.client()
    for process in [old, *started]:
        await process.started()
    await poll(
        knows_all(client, {**agents, "registry-1": "registry"}), INTERVAL + SLACK, "all listed"
    )

    # agentbus[fast] (in dev) installed uvloop: every agentbus process runs on it.
    assert [process.logged("agent started")["loop"] for process in [old, *started]] == [
        "uvloop"
    ] * 5
    old.popen.terminate()
    assert await old.exited(10) == 0
    new = procs.registry("registry-2")
    new_started = await new.started()
    bound = INTERVAL + SLACK
    rows = await poll(
        knows_all(client, {**agents, "registry-2": "registry"}, registry="registry-2"),
        bound - since(new_started),
        "the new registry to know every live agent",
    )
    whole_after = since(new_started)

    print(f"restarted registry whole {whole_after:.3f} s after it started")
    assert whole_after <= bound
    assert all(sorted(row["skills"]) == SKILLS[row["service"]] for row in rows.values())
    assert rows["beta-2"]["interval"] == 60


async def test_requests_are_shared_by_the_instances_of_a_service(procs: Processes) -> None:
    """50 requests to a service with two instances are all answered, and both instances serve."""
    instances = [procs.agent("Alpha", "alpha-1"), procs.agent("Alpha", "alpha-2")]
    client = await procs.client()
    for process in instances:
        await process.started()

    replies = await asyncio.gather(
        *(client.request("alpha", "double", {"n": n}, timeout=20) for n in range(50))
    )

    served = Counter(reply.sender_id for reply in replies)
    print(f"served by instance: {dict(served)}")
    assert [reply.result for reply in replies] == [2 * n for n in range(50)]
    assert set(served) == {"alpha-1", "alpha-2"}
    assert served.total() == 50


async def test_cli_request_reports_bad_parameters_and_unknown_actions(procs: Processes) -> None:
    """`agentbus request` exits 1 with invalid_parameters naming the field, or unknown_action."""
    alpha = procs.agent("Alpha", "alpha-1")
    await alpha.started()

    good, bad, unknown = await asyncio.gather(
        procs.cli("request", "alpha", "double", "--params", '{"n": 21}', "--result"),
        procs.cli("request", "alpha", "double", "--params", '{"n": "x"}'),
        procs.cli("request", "alpha", "triple", "--params", '{"n": 1}'),
    )

    assert (good.returncode, json.loads(good.stdout)) == (0, 42), good.stderr
    assert bad.returncode == 1, bad.stderr
    error = json.loads(bad.stdout)
    assert (error["message_type"], error["sender_id"]) == ("error", "alpha-1")
    assert error["payload"]["code"] == "invalid_parameters"
    assert "n: Input should be a valid integer" in error["payload"]["message"]
    assert [e["field"] for e in error["payload"]["details"]["errors"]] == ["n"]
    assert unknown.returncode == 1, unknown.stderr
    error = json.loads(unknown.stdout)
    assert error["payload"]["code"] == "unknown_action"
    assert "triple" in error["payload"]["message"]
    assert "double, slow" in error["payload"]["message"]
    assert {"double", "slow", "ping", "describe"} <= set(error["payload"]["details"]["available"])


async def test_one_shot_cli_leaves_no_queue_behind(procs: Processes) -> None:
    """`agentbus request`'s instance queue goes seconds after it exits, not a minute."""
    alpha = procs.agent("Alpha", "alpha-1")
    await alpha.started()
    prefix = f"{procs.exchange}.instance.client-"

    async def client_queues() -> list[str]:
        return await asyncio.to_thread(queues_with_prefix, procs.url, prefix)

    call = asyncio.create_task(
        procs.cli("request", "alpha", "slow", "--params", '{"seconds": 4}', "--result")
    )
    async with asyncio.timeout(30):
        while not (seen := await client_queues()):  # noqa: ASYNC110 - polling the broker
            await asyncio.sleep(0.2)
    done = await call
    exited = time.monotonic()
    async with asyncio.timeout(30):
        while await client_queues():  # noqa: ASYNC110 - polling the broker
            await asyncio.sleep(0.5)
    gone_after = time.monotonic() - exited

    print(f"one-shot client queue {seen} gone {gone_after:.1f} s after exit")
    assert (done.returncode, done.stdout.strip()) == (0, '"slept 4s"'), done.stderr
    assert len(seen) == 1
    assert gone_after < 30


async def test_sigterm_drains_work_in_flight_and_says_goodbye(procs: Processes) -> None:
    """SIGTERM during a 1 s request: it is still answered, exit 0, agent_offline for shutdown."""
    registry = procs.registry("registry-1")
    worker = procs.agent("Alpha", "alpha-1", "--grace", "5")
    client = await procs.client()
    inbox = await offline_inbox(procs)
    for process in (registry, worker):
        await process.started()
    await poll(
        knows_all(client, {"registry-1": "registry", "alpha-1": "alpha"}),
        INTERVAL + SLACK,
        "both listed",
    )

    call = asyncio.create_task(client.request("alpha-1", "slow", {"seconds": 1.0}, timeout=15))

    async def at_work() -> bool | None:
        pong = await client.request("alpha-1", "ping", timeout=2)
        return True if pong.result["in_flight"] == 1 else None

    await poll(at_work, 5, "alpha-1 to work on the slow request")
    terminated = time.monotonic()
    worker.popen.terminate()
    reply = await call
    answered = time.monotonic() - terminated
    status = await worker.exited(5 + SLACK)
    exited = time.monotonic() - terminated
    await within(
        MISSED * INTERVAL + SLACK,
        lambda: bool(inbox.about("alpha-1", sender="registry-1")),
        "the registry's agent_offline for alpha-1",
    )

    print(f"after SIGTERM: answered in {answered:.3f} s, exited in {exited:.3f} s")
    assert (reply.result, reply.sender_id) == ("slept 1s", "alpha-1")
    assert status == 0, worker.tail()
    assert worker.logged("agent stopped") is not None
    [(_, own)] = inbox.about("alpha-1", sender="alpha-1")
    [(_, seen)] = inbox.about("alpha-1", sender="registry-1")
    assert own["reason"] == seen["reason"] == "shutdown"
    rows = await list_agents(client, include_offline=True)
    assert rows["alpha-1"]["status"] == "offline"


async def test_two_registries_give_the_same_answer(procs: Processes) -> None:
    """Two registries running at once list the same agents, with the same services and skills."""
    expected = {
        "registry-a": "registry",
        "registry-b": "registry",
        "alpha-1": "alpha",
        "alpha-2": "alpha",
        "beta-1": "beta",
    }
    started = [procs.registry("registry-a"), procs.registry("registry-b")]
    started += [procs.agent("Alpha", "alpha-1"), procs.agent("Alpha", "alpha-2")]
    started.append(procs.agent("Beta", "beta-1"))
    client = await procs.client()
    for process in started:
        await process.started()
    for registry in ("registry-a", "registry-b"):
        await poll(knows_all(client, expected, registry), INTERVAL + SLACK, f"{registry} whole")

    first, second = await asyncio.gather(
        list_agents(client, "registry-a"), list_agents(client, "registry-b")
    )

    assert summary(first) == summary(second)
    assert {agent_id: row["service"] for agent_id, row in first.items()} == expected


async def test_frozen_agent_goes_offline_and_rejoins_when_thawed(procs: Processes) -> None:
    """SIGSTOP: offline within 3 intervals; SIGCONT: online again, and it serves requests."""
    expected = {"registry-1": "registry", "alpha-1": "alpha"}
    started = [procs.registry("registry-1"), frozen := procs.agent("Alpha", "alpha-1")]
    client = await procs.client()
    inbox = await offline_inbox(procs)
    online = Inbox()
    await client.subscribe("broadcast.event.agent_online", online)
    for process in started:
        await process.started()
    await poll(knows_all(client, expected), INTERVAL + SLACK, "both listed")

    stopped = time.monotonic()
    frozen.popen.send_signal(signal.SIGSTOP)
    bound = MISSED * INTERVAL + SLACK
    await within(
        bound, lambda: bool(inbox.about("alpha-1", sender="registry-1")), "agent_offline alpha-1"
    )
    offline_at = inbox.about("alpha-1", sender="registry-1")[0][0]
    rejoins_before = len(online.about("alpha-1", sender="registry-1"))
    frozen.popen.send_signal(signal.SIGCONT)
    await within(
        INTERVAL + SLACK,
        lambda: len(online.about("alpha-1", sender="registry-1")) > rejoins_before,
        "agent_online alpha-1 after SIGCONT",
    )
    reply = await client.request("alpha", "double", {"n": 4}, timeout=10)

    print(f"frozen agent offline {offline_at - stopped:.3f} s after SIGSTOP")
    assert offline_at - stopped <= bound
    assert reply.result == 8
    rows = await list_agents(client)
    assert rows["alpha-1"]["status"] == "ready"


async def test_cli_publishes_an_event_nobody_listens_to_unless_a_listener_is_required(
    procs: Processes,
) -> None:
    """`agentbus publish` drops an unheard event (exit 0); --require-listener: exit 2."""
    dropped, required = await asyncio.gather(
        procs.cli("publish", "deployed", "--data", '{"version": "1.2"}'),
        procs.cli("publish", "deployed", "--data", '{"version": "1.2"}', "--require-listener"),
    )

    assert dropped.returncode == 0, dropped.stderr
    sent = json.loads(dropped.stdout)
    assert sent["payload"] == {"event_name": "deployed", "event_data": {"version": "1.2"}}
    assert required.returncode == 2
    assert required.stdout == ""
    [line] = required.stderr.strip().splitlines()
    assert line.startswith("agentbus: error:")


async def test_cli_request_prints_a_skill_s_progress_and_parts_as_they_come(
    procs: Processes,
) -> None:
    """`agentbus request` writes each progress update and partial result on stderr, in order."""
    alpha = procs.agent("Alpha", "alpha-1")
    await alpha.started()

    done = await procs.cli("request", "alpha", "spell", "--params", '{"word": "bee"}', "--result")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["b", "e", "e"]
    updates = [line for line in done.stderr.splitlines() if line.startswith("alpha-1: ")]
    assert updates == [
        "alpha-1: progress 0% letter 1 of 3",
        "alpha-1: partial #0: b",
        "alpha-1: progress 33% letter 2 of 3",
        "alpha-1: partial #1: e",
        "alpha-1: progress 67% letter 3 of 3",
        "alpha-1: partial #2: e",
    ]
