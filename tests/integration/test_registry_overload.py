"""A registry that cannot keep up says so, and never reports a beating agent offline.

On the real broker: 200 agents beat every 0.25 s (800 beats/s, numbered as ``Agent.beat``
numbers them) from a thread of their own, while the registry, made slow (2 ms per beat),
handles at most 500/s through a feed that holds 100: beats are dropped on the way. Then the
registry is fast again, and 5 agents fall silent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from beats import Beats

from agentbus import Settings
from agentbus.agents import AGENT_OFFLINE
from agentbus.bus import Topology
from agentbus.envelopes import EventEnvelope
from agentbus.registry import Registry
from support.broker import delete_topology
from support.waiting import wait_until

AGENTS, INTERVAL, MISSED = 200, 0.25, 3
SLOW = 0.002  # s per beat: the registry handles at most 500 of the 800 beats/s
SILENCED = {f"ov-{i:03d}" for i in range(0, AGENTS, AGENTS // 5)}


async def test_an_overloaded_registry_holds_its_verdicts_and_says_so(
    broker_url: str, exchange_name: str
) -> None:
    """Beats lost: no beating agent goes offline, stats say overloaded; then silence is judged."""
    settings = Settings(url=broker_url, exchange=exchange_name)
    registry = Registry(settings=settings, heartbeat_interval=INTERVAL, missed_intervals=MISSED,
                        feed_length=100)  # fmt: skip
    offline: list[str] = []
    refresh = registry.table.refresh

    def slow_refresh(data: Any) -> Any:
        time.sleep(SLOW)  # the registry's own work, made slow: the thread of beats goes on
        return refresh(data)

    registry.table.refresh = slow_refresh  # type: ignore[method-assign]
    beats = Beats(broker_url, exchange_name, agents=AGENTS, interval=INTERVAL, prefix="ov")
    try:
        async with registry:

            async def gone(event: EventEnvelope) -> None:
                if event.sender_id == registry.id:
                    offline.append(str(event.payload.event_data["agent_id"]))

            await registry.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", gone)
            beats.start()
            await wait_until(lambda: len(registry.table) > AGENTS // 2, timeout=10)
            await asyncio.sleep(0)
            async with asyncio.timeout(30):  # behind first (2,000 beats in its window), then
                while not (stats := await registry.stats())["beats_lost"]:  # noqa: ASYNC110 - a skill's counter, no event
                    await asyncio.sleep(0.1)  # the gaps of the beats dropped reach it
            assert stats["overloaded"]
            # Watch it losing beats for 3 offline windows: a window in which no agent must go.
            await asyncio.sleep(3 * INTERVAL * MISSED)
            stats = await registry.stats()
            assert stats["beats_lost"] > 0
            assert stats["overloaded"]
            # Every agent beats: none called offline, overloaded as it is; unless the test's
            # own thread of beats was starved (a loaded host: five went out over a second late).
            assert set(offline) <= beats.late, (offline, sorted(beats.late))

            registry.table.refresh = refresh  # type: ignore[method-assign]
            await wait_until(lambda: not registry._overloaded, timeout=30)
            known = {record.agent_id for record in registry.table.records() if record.online}
            assert {f"ov-{i:03d}" for i in range(AGENTS)} - beats.late <= known
            assert set(offline) <= beats.late

            beats.silenced |= SILENCED  # the judgement comes back: silence is death again
            silenced_at = time.monotonic()
            await wait_until(lambda: set(offline) >= SILENCED, timeout=10)
            took = time.monotonic() - silenced_at
            assert set(offline) - beats.late == SILENCED - beats.late
            print(f"\nsilenced agents reported offline after {took:.2f} s")
    finally:
        beats.stop.set()
        beats.join(timeout=10)
        topology = Topology(exchange_name)
        queues = [topology.service_queue("registry"), topology.instance_queue(registry.id)]
        await delete_topology(broker_url, exchange_name, queues)
