"""The link between two sites cut, stalled, stopped and slowed, then restored (docs/sites.md).

While the link is down, a request that only the far site serves fails at once with
``SiteUnreachable`` (``agent_unavailable``), local work goes on, and what was in flight
when the link went is answered once it is back: nothing lost, nothing done twice (the
ledger, printed). Each test prints what it measured: how long until the link's loss was
known, and until the sites saw each other again.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chaos_agents import LedgerWorker
from chaos_support import eventually, until
from fault_support import Team
from link_support import Caller, Ending, heard, ledger_rows, until_true

from agentbus import SiteUnreachable, Unroutable
from agentbus.bus import Bus, Topology
from agentbus.testing.chaos import Ledger, LedgerReport, queue_depths
from conftest import Link

pytestmark = pytest.mark.sites

_LINK_UP = 60.0  # s: the links start and carry each site's bindings to the other
_BEAT = 1.0  # s: the agents' heartbeat interval; a beacon empties three of them after the last
_AT_ONCE = 1.0  # s: a refusal this quick did not wait for the request's timeout (30 s)


class NearWorker(LedgerWorker):
    """The ledger worker under another name: the service site ``a`` runs itself."""

    name = "near-worker"


@dataclass
class Scene:
    """A worker at each site, and a client at ``a`` calling both."""

    link: Link
    ledger: Ledger
    far_worker: LedgerWorker
    across: Caller  # to the worker at b: crosses the link
    local: Caller  # to the worker at a: stays at a

    @property
    def beacon(self) -> str:
        """The queue at ``a`` that holds the latest heartbeat heard from ``b``."""
        return Topology(self.link.sites.a.exchange).site_beacon("b")

    def also(self, label: str) -> Caller:
        """Another caller to the worker at ``b``, its requests labelled ``label``."""
        return Caller(self.across.bus, self.ledger, self.across.service, label)

    async def b_heard(self) -> bool:
        return await heard(self.link.sites.a.url, self.beacon)

    async def b_silent(self) -> bool:
        return not await self.b_heard()

    async def report(self) -> LedgerReport:
        """The ledger's report, with what is left in the workers' queues at both sites."""
        topology = Topology(self.link.sites.a.exchange)
        residue: dict[str, int] = {}
        for settings, service in (
            (self.link.sites.b, "ledger-worker"),
            (self.link.sites.a, "near-worker"),
        ):
            name = topology.service_queue(service)
            residue[name] = (await queue_depths(settings.url, [name]))[name].messages
        report = self.ledger.report(residue)
        print(ledger_rows(self.ledger))
        print(report.summary())
        return report


@pytest.fixture
async def scene(linked: Link, team: Team, tmp_path: Path) -> AsyncIterator[Scene]:
    """Linked sites with a worker each, the link up: b's requests served, its beats heard."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        settings = linked.sites
        far = LedgerWorker(
            agent_id="worker-b", settings=settings.b, ledger=ledger, heartbeat_interval=_BEAT
        )
        await team.start(far)
        near = NearWorker(
            agent_id="worker-a", settings=settings.a, ledger=ledger, heartbeat_interval=_BEAT
        )
        await team.start(near)
        bus = await Bus(settings.a, agent_id="client-a").open()
        try:
            across = Caller(bus, ledger, "ledger-worker", "across")
            found = Scene(linked, ledger, far, across, Caller(bus, ledger, "near-worker", "local"))
            await until_true(found.b_heard, _LINK_UP, "b's heartbeats heard at a")
            await eventually(across.served, _LINK_UP, "a request from a served at b")
            yield found
        finally:
            await bus.aclose()


def _assert_clean(report: LedgerReport) -> None:
    assert report.lost == []
    assert report.duplicated == {}
    assert report.unexpected == []
    assert report.failed_with_effect == []
    assert not any(report.residue.values())


async def _refused_at_once(caller: Caller, kind: type[Unroutable]) -> Ending:
    ending = await caller.call(timeout=30)
    assert isinstance(ending.error, kind), ending
    assert ending.error.code == "agent_unavailable"
    assert ending.seconds < _AT_ONCE, ending
    return ending


async def _local_work_goes_on(scene: Scene) -> None:
    endings = [await scene.local.call(timeout=10) for _ in range(10)]
    assert [e.detail for e in endings] == ["response"] * 10
    assert {e.reply.result["agent_id"] for e in endings if e.reply} == {"worker-a"}


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_link_down_fails_fast_and_loses_nothing(fault: str, scene: Scene) -> None:
    """Cut: the link's connections reset, none let in. Stall: nothing crosses, none closes."""
    across, link = scene.across, scene.link
    in_flight, waiting = scene.also("in flight"), scene.also("queued")
    # At work at b when the link goes: their answers cross once it is back.
    held = [asyncio.create_task(in_flight.call(timeout=60, seconds=1.0)) for _ in range(4)]
    await until(lambda: scene.far_worker.in_flight == 4, 10, "four requests at work at b")
    getattr(link, fault)()
    went = time.monotonic()
    # Sent before the loss is known: they wait in the link's queue at a, for the link.
    queued = [asyncio.create_task(waiting.call(timeout=60)) for _ in range(2)]
    known = await until_true(scene.b_silent, 10 * _BEAT, "b's beacon at a to go silent")
    refused = await _refused_at_once(across, SiteUnreachable)
    assert refused.error is not None
    assert refused.error.details["sites"] == ["b"]
    await _local_work_goes_on(scene)
    await until(lambda: scene.far_worker.in_flight == 0, 10, "b to finish its work")
    down_for = time.monotonic() - went

    link.restore()
    back = time.monotonic()
    await eventually(lambda: across.served(timeout=5), 30, "a request across, the link back")
    served_again = time.monotonic() - back
    heard_again = await until_true(scene.b_heard, 30, "b's heartbeats heard at a again")
    ended = await asyncio.gather(*held, *queued)
    print(
        f"{fault}: loss known after {known:.2f} s; refused in {refused.seconds * 1000:.1f} ms; "
        f"down {down_for:.2f} s; after restore: served across in {served_again:.2f} s, "
        f"beacon heard in +{heard_again:.2f} s; in flight and queued across it: "
        + ", ".join(f"{e.detail} in {e.seconds:.2f} s" for e in ended)
    )
    # Taken at b before the cut: answered once, after the link is back.
    assert [e.detail for e in ended[:4]] == ["response"] * 4
    # Sent into the link's queue while b still seemed heard (a beat less than three
    # intervals old): served after the restore; refused at once had b's last beat been
    # older than that (never seen here, but a loaded machine may delay beats).
    assert {e.detail for e in ended[4:]} <= {"response", "error:SiteUnreachable"}
    _assert_clean(await scene.report())


async def test_stopped_link_refuses_at_once_and_starts_again(scene: Scene) -> None:
    """The operator removes the upstream of the link b runs (a's requests to b): the link's
    queue at a goes with it, so a's outbox has no route: ``Unroutable`` at once, saying that
    nothing at a serves it and the link to b may be down (not "nobody serves it")."""
    across, link = scene.across, scene.link
    await link.stop_link("b")
    stopped = time.monotonic()

    async def refused() -> Ending | None:
        ending = await across.call(timeout=2)
        return ending if isinstance(ending.error, Unroutable) else None

    await eventually(refused, 30, "a request across refused: no route")
    known = time.monotonic() - stopped
    ending = await _refused_at_once(across, Unroutable)
    assert type(ending.error) is Unroutable  # b is heard: its beacon is fed
    assert str(ending.error) == (
        "nothing at this site serves 'ledger-worker', and the peer site(s) b did not take "
        "it: nothing serves it there either, or the link to them is down "
        "(rabbitmqctl federation_status there; docs/sites.md)"
    )
    assert ending.error.details["sites"] == ["b"]
    await _local_work_goes_on(scene)

    await link.start_link("b")
    began = time.monotonic()
    await eventually(lambda: across.served(timeout=5), 30, "a request across, the link back")
    print(
        f"link stopped: refused after {known:.2f} s, in {ending.seconds * 1000:.1f} ms; "
        f"started again: served across in {time.monotonic() - began:.2f} s"
    )
    _assert_clean(await scene.report())


async def test_stopped_link_home_is_a_site_unreachable(scene: Scene) -> None:
    """The operator removes the upstream of the link a runs (b's heartbeats and answers to
    a): b's beacon at a empties, and a request only b serves is ``SiteUnreachable`` at once,
    naming b and the link; loading a's definitions again starts it."""
    across, link = scene.across, scene.link
    await link.stop_link("a")
    await until_true(scene.b_silent, 10 * _BEAT, "b's beacon at a to go silent")
    ending = await _refused_at_once(across, SiteUnreachable)
    assert str(ending.error) == (
        "nothing at this site serves 'ledger-worker', and no heartbeat was heard lately from "
        "the site(s) that might: b (the link is down)"
    )
    assert ending.error is not None
    assert ending.error.details["sites"] == ["b"]

    await link.start_link("a")
    await until_true(scene.b_heard, 30, "b's heartbeats heard at a again")
    await eventually(lambda: across.served(timeout=5), 30, "a request across, the link back")
    _assert_clean(await scene.report())


async def test_delay_slows_only_what_crosses(scene: Scene) -> None:
    """50 ms added each way on the link: a request across pays it twice (there, and its
    answer back); one served at its own site does not."""
    across, local, link = scene.across, scene.local, scene.link

    async def p50(caller: Caller) -> float:
        endings = [await caller.call(timeout=10) for _ in range(15)]
        assert [e.detail for e in endings] == ["response"] * 15
        return statistics.median(e.seconds for e in endings)

    plain = await p50(across)
    link.slow(0.05)
    try:
        slowed, local_slowed = await p50(across), await p50(local)
    finally:
        link.restore()
    print(
        f"p50 across: {plain * 1000:.1f} ms, with 50 ms each way: {slowed * 1000:.1f} ms; "
        f"p50 local meanwhile: {local_slowed * 1000:.1f} ms"
    )
    assert slowed >= 0.1  # the delay is on the path, both ways
    assert local_slowed < 0.1  # and not on a request served at its own site
    _assert_clean(await scene.report())
