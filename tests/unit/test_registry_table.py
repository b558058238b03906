"""The registry's liveness table, driven by a fake monotonic clock."""

from __future__ import annotations

from collections.abc import Callable

from agentbus.agents import AgentCard, AgentStatus, Heartbeat, SkillCard
from agentbus.registry import LivenessTable, Transition


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def beat(
    agent_id: str,
    *,
    service: str = "svc",
    status: AgentStatus = AgentStatus.READY,
    in_flight: int = 0,
    capacity: int = 4,
    interval: float = 5.0,
    skills: tuple[str, ...] = ("work",),
    with_card: bool = True,
) -> Heartbeat:
    card = AgentCard(
        id=agent_id,
        name=service,
        skills=[SkillCard(name=name) for name in skills],
        capacity=capacity,
    )
    return Heartbeat(
        agent_id=agent_id,
        service=service,
        status=status,
        in_flight=in_flight,
        capacity=capacity,
        interval=interval,
        card_digest=card.digest(),
        card=card if with_card else None,
    )


def test_first_beat_brings_an_agent_online_once() -> None:
    """The first heartbeat is an online transition; the next ones are not."""
    table = LivenessTable(clock=FakeClock())
    _, first = table.observe(beat("a-1"))
    _, second = table.observe(beat("a-1"))
    assert first is Transition.ONLINE
    assert second is None


def test_offline_after_three_missed_intervals_of_the_agents_own_interval() -> None:
    """An agent is offline once 3 of its own intervals pass without a beat, not before."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    table.observe(beat("fast", interval=1.0))
    table.observe(beat("slow", interval=10.0))

    clock.now += 2.9
    assert table.sweep() == []
    clock.now += 0.2
    gone = table.sweep()

    assert [record.agent_id for record in gone] == ["fast"]
    assert table.sweep() == []  # reported once
    assert [info.agent_id for info in table.query()] == ["slow"]
    assert [info.status for info in table.query(include_offline=True)] == ["offline", "ready"]


def test_a_beat_after_going_offline_brings_it_back_online() -> None:
    """An agent that beats again after being declared offline comes back online."""
    clock = FakeClock()
    table = LivenessTable(clock=clock)
    table.observe(beat("a-1", interval=1.0))
    clock.now += 5
    table.sweep()
    _, transition = table.observe(beat("a-1", interval=1.0))
    assert transition is Transition.ONLINE


def test_depart_marks_offline_only_once() -> None:
    """A goodbye marks the agent offline; a second goodbye is no transition."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1"))
    assert table.depart("a-1") is not None
    assert table.depart("a-1") is None
    assert table.depart("never-seen") is None


def test_a_beat_taken_after_the_goodbye_that_followed_it_lists_nobody_again() -> None:
    """Beats and goodbyes reach a registry by two queues: the last beat can come after the
    goodbye. The goodbye names that beat's number, so it is old news; a later number, or
    0 (started again), is a new life."""
    table = LivenessTable(clock=FakeClock())
    for seq in (0, 1):
        table.observe(beat("a-1").model_copy(update={"seq": seq}))
    assert table.depart("a-1", seq=2) is not None
    late = beat("a-1", with_card=False).model_copy(update={"seq": 2})
    assert table.observe(late) == (table.get("a-1"), None)
    raw = late.model_dump(mode="json", exclude_none=True)
    assert table.refresh(raw) == (table.get("a-1"), None)  # the fast path too
    assert not table.records()[0].online
    _, transition = table.observe(late.model_copy(update={"seq": 0}))
    assert transition is Transition.ONLINE
    table.depart("a-1", seq=0)
    _, transition = table.observe(late.model_copy(update={"seq": 1}))
    assert transition is Transition.ONLINE


def test_offline_agents_are_forgotten_after_a_while() -> None:
    """Offline records are dropped after forget_after seconds."""
    clock = FakeClock()
    table = LivenessTable(forget_after=60, clock=clock)
    table.observe(beat("a-1", interval=1.0))
    clock.now += 10
    table.sweep()
    clock.now += 61
    table.sweep()
    assert "a-1" not in table


def test_capable_orders_ready_before_busy_then_least_loaded() -> None:
    """find_skill's order: ready agents first, then by load; draining ones left out."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("busy-1", status=AgentStatus.BUSY, in_flight=4))
    table.observe(beat("ready-loaded", in_flight=3))
    table.observe(beat("ready-idle", in_flight=0))
    table.observe(beat("draining", status=AgentStatus.DRAINING))
    table.observe(beat("other-skill", skills=("else",)))

    order = [info.agent_id for info in table.capable("work")]

    assert order == ["ready-idle", "ready-loaded", "busy-1"]


def test_query_filters_by_service_status_and_skill() -> None:
    """list_agents filters combine."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1", service="alpha"))
    table.observe(beat("a-2", service="alpha", status=AgentStatus.BUSY))
    table.observe(beat("b-1", service="beta", skills=("shout",)))

    assert [i.agent_id for i in table.query(service="alpha")] == ["a-1", "a-2"]
    assert [i.agent_id for i in table.query(status="busy")] == ["a-2"]
    assert [i.agent_id for i in table.query(skill="shout")] == ["b-1"]
    assert table.query(service="alpha", skill="shout") == []


def test_a_changed_digest_without_a_card_drops_the_stale_card() -> None:
    """When an agent's card changes and the beat carries only the digest, the card is refetched."""
    table = LivenessTable(clock=FakeClock())
    record, _ = table.observe(beat("a-1"))
    assert record.card is not None
    changed = beat("a-1", skills=("work", "more"), with_card=False)
    record, _ = table.observe(changed)
    assert record.card is None
    assert record.card_digest == changed.card_digest


def test_next_sweep_is_due_when_the_earliest_agent_could_go_offline() -> None:
    """The sweeper sleeps until the earliest possible offline moment, within bounds."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    assert table.next_sweep_in() == 1.0
    table.observe(beat("a-1", interval=0.1))
    assert abs(table.next_sweep_in() - 0.3) < 1e-9
    clock.now += 10
    assert table.next_sweep_in() == 0.05


def test_the_registry_never_sweeps_itself_offline() -> None:
    """An agent named alive stays online however late its own beats are."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    table.observe(beat("registry-1", interval=1.0))
    table.observe(beat("other", interval=1.0))
    clock.now += 10
    gone = table.sweep(alive="registry-1")
    assert [record.agent_id for record in gone] == ["other"]
    assert [info.agent_id for info in table.query()] == ["registry-1"]


def common_beat(agent_id: str, **changes: object) -> dict[str, object]:
    """A beat's event_data as it comes off the wire: the digest, not the card."""
    data = beat(agent_id, with_card=False).model_dump(mode="json", exclude_none=True)
    return data | changes


def test_refresh_takes_a_known_agents_common_beat() -> None:
    """A known agent's beat with the same card digest updates status, load and receive time."""
    clock = FakeClock()
    table = LivenessTable(clock=clock)
    table.observe(beat("a-1"))
    clock.now += 2

    refreshed = table.refresh(common_beat("a-1", status="busy", in_flight=4))

    assert refreshed is not None
    record, transition = refreshed
    assert transition is None
    assert (record.status, record.in_flight, record.last_seen) == ("busy", 4, clock.now)
    assert record.card is not None  # kept


def test_refresh_leaves_anything_unusual_to_full_validation() -> None:
    """New agents, cards, changed digests or settings and odd values are not taken raw."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1"))
    with_card = beat("a-1").model_dump(mode="json", exclude_none=True)

    for data in (
        common_beat("unknown"),
        with_card,
        common_beat("a-1", card_digest="other"),
        common_beat("a-1", service="elsewhere"),
        common_beat("a-1", interval=1.0),
        common_beat("a-1", capacity=9),
        common_beat("a-1", status="asleep"),
        common_beat("a-1", in_flight=-1),
        common_beat("a-1", in_flight="3"),
        common_beat("a-1", in_flight=True),
    ):
        assert table.refresh(data) is None, data


def test_refresh_brings_an_offline_agent_back_online() -> None:
    """A common beat from an agent declared offline is an online transition."""
    clock = FakeClock()
    table = LivenessTable(clock=clock)
    table.observe(beat("a-1", interval=1.0))
    clock.now += 5
    assert [r.agent_id for r in table.sweep()] == ["a-1"]

    refreshed = table.refresh(common_beat("a-1", interval=1.0))

    assert refreshed is not None
    assert refreshed[1] is Transition.ONLINE
    clock.now += 2.9
    assert table.sweep() == []
    clock.now += 0.2
    assert [r.agent_id for r in table.sweep()] == ["a-1"]


def test_a_changed_interval_is_judged_by_the_new_interval() -> None:
    """An agent that slows its beat is given 3 of its new intervals, not its old ones."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    table.observe(beat("a-1", interval=1.0))
    table.observe(beat("a-1", interval=10.0))
    clock.now += 29
    assert table.sweep() == []
    assert abs(table.next_sweep_in() - 1.0) < 1e-9
    clock.now += 2
    assert [r.agent_id for r in table.sweep()] == ["a-1"]


def test_sweep_reports_every_silent_agent_whatever_order_they_beat_in() -> None:
    """Agents beating again are kept; the silent ones go offline, each once."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    for n in range(6):
        table.observe(beat(f"a-{n}", interval=1.0))
        clock.now += 0.1
    for n in (4, 0, 2):  # beat again, out of their first order
        assert table.refresh(common_beat(f"a-{n}", interval=1.0)) is not None
    clock.now += 2.95  # 3 intervals after the first beats, not after the second ones

    gone = table.sweep()

    assert sorted(r.agent_id for r in gone) == ["a-1", "a-3", "a-5"]
    assert [i.agent_id for i in table.query()] == ["a-0", "a-2", "a-4"]


class _Recorder:
    """Stands in for a structlog logger: keeps (level, event) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        def record(event: str, **_: object) -> None:
            self.calls.append((level, event))

        return record


async def test_a_stopping_registry_drops_its_transition_news_without_a_warning() -> None:
    """Its bus closed (a normal shutdown), an offline transition is not sent, and not a warning."""
    from agentbus.registry import Registry
    from agentbus.testing import MemoryBroker, MemoryBus

    bus = MemoryBus(MemoryBroker())
    registry = Registry(bus=bus, heartbeat_interval=1)
    await registry.start()
    record, _ = registry.table.observe(beat("alpha-1"))
    await registry.stop()
    await bus.aclose()  # a bus handed in stays its owner's to close
    registry._log = log = _Recorder()
    await registry._announce_transition("agent_offline", record, reason="shutdown")
    assert [level for level, event in log.calls if "not sent" in event] == ["debug"]


def test_slack_waits_out_beats_that_are_late_in_coming() -> None:
    """With the feed's lag as slack, an agent whose beat is still queued is not offline."""
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    table.observe(beat("a-1", interval=1.0))

    clock.now += 3.5
    assert table.sweep(slack=1.0) == []
    assert abs(table.next_sweep_in(slack=1.0) - 0.5) < 1e-9
    clock.now += 0.6
    assert [record.agent_id for record in table.sweep(slack=1.0)] == ["a-1"]


async def test_cards_unknown_for_many_agents_are_fetched_a_few_at_a_time() -> None:
    """Thousands of agents whose card-bearing first beat was lost: 32 fetches at once, not all."""
    import asyncio

    from agentbus.registry import Registry
    from agentbus.testing import MemoryBroker, MemoryBus

    bus = MemoryBus(MemoryBroker())
    registry = Registry(bus=bus, heartbeat_interval=1)
    release = asyncio.Event()
    active = peak = 0

    async def slow_fetch(agent_id: str) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await release.wait()
        active -= 1

    registry._fetch_card = slow_fetch  # type: ignore[method-assign]
    await registry.start()
    try:
        for n in range(200):
            data = beat(f"agent-{n}", with_card=False).model_dump(mode="json", exclude_none=True)
            registry._on_beat({"sender_id": f"agent-{n}", "payload": {"event_data": data}})
        async with asyncio.timeout(5):
            while active < 32:  # noqa: ASYNC110 - the fetches are tasks of the registry's
                await asyncio.sleep(0)
        started = peak
        known = sum(record.agent_id.startswith("agent-") for record in registry.table.records())
        release.set()
    finally:
        await registry.stop()
        await bus.aclose()
    assert (started, known) == (32, 200)


def numbered(agent_id: str, seq: int, **kwargs: object) -> dict[str, object]:
    """The raw data of a known agent's common beat, numbered ``seq``."""
    data = beat(agent_id, with_card=False, **kwargs).model_dump(mode="json", exclude_none=True)  # type: ignore[arg-type]
    return data | {"seq": seq}


def test_a_gap_in_beat_numbers_counts_the_beats_lost() -> None:
    """Beats 1 and 2 never came: the table counts 2 lost; a restart (lower number) is no loss."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1"))
    assert table.refresh(numbered("a-1", 0)) is not None
    table.refresh(numbered("a-1", 3))
    assert table.lost == 2
    table.refresh(numbered("a-1", 0))  # the same id, started again
    table.refresh(numbered("a-1", 1))
    assert table.lost == 2


def test_no_agent_goes_offline_by_silence_while_beats_are_being_lost() -> None:
    """A gap anywhere holds every verdict of that interval until 3 intervals pass without one.

    Under overload a silent agent may be a live one whose beats were dropped: the table
    judges it only once beats have come through whole for ``missed`` intervals.
    """
    clock = FakeClock()
    table = LivenessTable(missed=3, clock=clock)
    table.observe(beat("silent", interval=1.0))
    table.observe(beat("lossy", interval=1.0))
    table.refresh(numbered("lossy", 0, interval=1.0))
    for seq in range(2, 10, 2):  # every other beat of "lossy" lost, for 4 s
        clock.now += 1.0
        table.refresh(numbered("lossy", seq, interval=1.0))
        assert table.sweep() == []
        assert table.lossy()
    assert table.lost == 4
    assert table.next_sweep_in() == 1.0  # the most it waits: no sweeping every 50 ms

    for seq in range(9, 12):  # whole again
        clock.now += 1.0
        table.refresh(numbered("lossy", seq, interval=1.0))
    assert [record.agent_id for record in table.sweep()] == ["silent"]
    assert not table.lossy()


def test_an_unnumbered_or_malformed_number_is_not_a_loss() -> None:
    """Agents that do not number their beats are judged as before; a bad number is a slow beat."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1"))
    data = beat("a-1", with_card=False).model_dump(mode="json", exclude_none=True)
    assert table.refresh(data) is not None
    assert table.refresh(data | {"seq": -1}) is None
    assert table.refresh(data | {"seq": "7"}) is None
    assert table.lost == 0
    assert not table.lossy()


def test_a_beat_come_late_by_digest_is_no_news_and_no_loss() -> None:
    """Beat 5 after beat 6 (another registry's digest came late): nothing changes; 0 restarts."""
    table = LivenessTable(clock=FakeClock())
    table.observe(beat("a-1"))
    table.refresh(numbered("a-1", 4))
    table.refresh(numbered("a-1", 6))
    table.refresh(numbered("a-1", 5))
    table.refresh(numbered("a-1", 7))
    assert table.lost == 1  # beat 5 counted lost when 6 came; its late arrival does not undo it
    assert table.get("a-1").seq == 7  # type: ignore[union-attr]


def test_a_digest_gives_back_the_beats_a_registry_heard() -> None:
    """Rows become beats as the agents sent them; a malformed part is reported, not raised."""
    from agentbus.registry._shares import beats_of

    problems: list[str] = []
    data = {
        "rows": [["a-1", 3, "ready", 0, "svc", 5.0, 4, "d1"], ["short"]],
        "beats": [{"agent_id": "b-1", "card": {}}, "nonsense"],
    }
    beats = list(beats_of(data, problems.append))
    row = {"agent_id": "a-1", "seq": 3, "status": "ready", "in_flight": 0, "service": "svc"}
    assert beats[0] == row | {"interval": 5.0, "capacity": 4, "card_digest": "d1"}
    assert beats[1] == {"agent_id": "b-1", "card": {}}
    assert len(problems) == 2
    assert list(beats_of({"rows": "x"}, problems.append)) == []
    assert len(problems) == 3
