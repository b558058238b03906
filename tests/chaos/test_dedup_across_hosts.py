"""De-duplication across hosts: a copy of a request redelivered to another process.

Worker processes here share nothing but the broker (no de-duplication file), as on two
hosts. The two moments where a per-process window cannot help are forced by the test,
not left to timing luck:

- *while the first still runs it*: worker A takes the request and holds it (the skill
  ``hold`` runs until the test says go); a partition (a stalled proxy) cuts A off, the
  broker closes A's connection and requeues the request, and worker B takes the copy
  while A, which hears nothing of the close, runs on;
- *after it finished, before its ack*: worker A answers the request and is SIGKILLed by
  the fault point ``bus.answered`` (answered, not acked); the copy goes to worker B.

With each process's own window (the default) B runs the copy: the effect is done twice,
and the ``window`` cases pin that limit. With the shared store (``AGENTBUS_DEDUP_URL``,
Redis) B waits for A's run and answers with its reply, or answers from the store: done
once. The last test runs keyed traffic through forced closes of every connection with the
store. Figures are printed: ``pytest -rP``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos_support import BusOpener
from fault_support import SERVICE, Producer, consumers_back, steady_traffic, wait_for

from agentbus.bus import Topology
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    ChaosProxy,
    Ledger,
    LedgerReport,
    PrivateBroker,
)

pytestmark = pytest.mark.chaos

HERE = Path(__file__).resolve().parent
RECONNECT = 0.5
FAST = {"reconnect_interval": RECONNECT}
WAITS = "request runs in another process; this copy waits for its end"
MODES = ["window", "redis"]


def _env(mode: str, redis_url: str) -> dict[str, str]:
    return {
        "AGENTBUS_DEDUP_URL": redis_url if mode == "redis" else "",
        "AGENTBUS_DEDUP_PATH": "",  # nothing shared on the side
        "AGENTBUS_RECONNECT_INTERVAL": str(RECONNECT),
    }


def _worker(
    launcher: AgentLauncher, agent_id: str, url: str, exchange: str, env: dict[str, str]
) -> AgentProcess:
    return launcher.start(
        "chaos_agents:LedgerWorker",
        *("--id", agent_id, "--heartbeat", "1"),
        url=url,
        exchange=exchange,
        cwd=HERE,
        env=env,
    )


async def _stop(*workers: AgentProcess) -> None:
    """SIGTERM: each drains (a copy still waiting finishes first) and exits."""
    for worker in workers:
        if worker.is_running:
            worker.terminate()
    for worker in workers:
        await worker.exited(30)


def _show(name: str, report: LedgerReport, **figures: object) -> None:
    extra = " ".join(f"{key}={value}" for key, value in figures.items())
    print(f"\n[{name}] {report.summary()} {extra}")


def _assert_nothing_lost(report: LedgerReport, calls: int) -> None:
    assert report.sent == calls
    assert report.lost == [], "confirmed without an effect"
    assert report.unexpected == []
    assert report.recorded_twice == []
    assert not any(report.residue.values()), f"left in the queues: {report.residue}"


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_taken_by_another_host_while_the_first_still_runs_it(
    private_broker: PrivateBroker,
    chaos_proxy: ChaosProxy,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_redis_url: str,
    tmp_path: Path,
    mode: str,
) -> None:
    """Worker A runs a request when a partition cuts it off: the broker closes its
    connection and requeues the request, worker B takes the copy, and A, which has not
    heard (its link is stalled), runs on and does the effect. Per-process windows: B runs
    it too (done twice). Shared store: B waits for A's run and answers with its reply."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = _env(mode, dedup_redis_url) | {"CHAOS_HOLD_DIR": str(marks)}
    # A long heartbeat: A hears of its closed connection when the link heals, not before.
    a_env = env | {"AGENTBUS_HEARTBEAT": "60"}
    a = _worker(agent_process, "worker-a", chaos_proxy.url(), chaos_exchange, a_env)
    await a.started()
    client = await open_bus(private_broker.url, **FAST)
    producer = Producer(client, ledger)
    call = asyncio.create_task(producer.call("hold", timeout=60))
    await wait_for((marks / "started-worker-a").exists, 20, "worker-a to start the request")
    b = _worker(agent_process, "worker-b", private_broker.url, chaos_exchange, env)
    await b.started()

    chaos_proxy.stall()  # the partition: nothing reaches worker-a, not even a close
    await asyncio.to_thread(private_broker.close_connections)  # the broker gives up on it
    await wait_for(
        lambda: (marks / "started-worker-b").exists() or WAITS in b.text(),
        20,
        "worker-b to take the copy",
    )
    ran_in_b, waited_in_b = (marks / "started-worker-b").exists(), WAITS in b.text()
    (marks / "go").touch()  # worker-a's run ends with its effect (and worker-b's, if any)
    await wait_for(lambda: "worker-a" in _agents(ledger), 20, "worker-a's effect")
    chaos_proxy.resume()
    reply = await call
    await _stop(a, b)
    report = await ledger.check(url=private_broker.url, queues=[_queue(chaos_exchange)])

    _show(f"copy while running, {mode}", report, ran_in_b=ran_in_b, waited_in_b=waited_in_b)
    assert reply is not None
    _assert_nothing_lost(report, producer.calls)
    key = reply.result["key"]
    if mode == "window":  # the limit of per-process windows, pinned
        assert ran_in_b
        assert report.duplicated == {key: 2}
    else:
        assert waited_in_b
        assert not ran_in_b
        assert report.duplicated == {}
        assert ledger.effects() == [(key, "worker-a")]
        assert reply.result["agent_id"] == "worker-a", "the copy got worker-a's reply"


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_of_a_request_answered_but_not_acked_taken_by_another_host(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_redis_url: str,
    mode: str,
) -> None:
    """Worker A answers a request and dies before its ack (the fault point
    ``bus.answered``); worker B gets the copy. Per-process windows: B runs it again.
    Shared store: B answers it with A's stored reply."""
    url = private_broker.url
    env = _env(mode, dedup_redis_url)
    a = _worker(
        agent_process,
        "worker-a",
        url,
        chaos_exchange,
        env | {"AGENTBUS_FAULT_POINTS": "bus.answered:1"},
    )
    await a.started()
    client = await open_bus(url, **FAST)
    producer = Producer(client, ledger)
    reply = await producer.call("work", timeout=30)
    assert await a.exited(10) == -signal.SIGKILL
    b = _worker(agent_process, "worker-b", url, chaos_exchange, env)
    await b.started()

    def copy_answered() -> bool:  # the copy's answer reaches the client, after the first
        return client.stats.late_replies + client.stats.unknown_replies >= 1

    await wait_for(copy_answered, 20, "worker-b to answer the copy")
    await _stop(b)
    report = await ledger.check(url=url, queues=[_queue(chaos_exchange)])

    _show(f"copy after the answer, {mode}", report)
    assert reply is not None
    assert reply.result["agent_id"] == "worker-a"
    _assert_nothing_lost(report, producer.calls)
    key = reply.result["key"]
    if mode == "window":  # the limit of per-process windows, pinned
        assert report.duplicated == {key: 2}
    else:
        assert report.duplicated == {}
        assert ledger.effects() == [(key, "worker-a")]


async def test_keyed_requests_through_forced_closes_are_done_once_with_the_shared_store(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_redis_url: str,
) -> None:
    """Two worker processes sharing only the broker and the store; effects of 0.2 s,
    recorded without ``apply_once``; every connection force-closed 6 times: 0 lost, 0 done
    twice, every request answered."""
    url = private_broker.url
    env = _env("redis", dedup_redis_url)
    workers = [_worker(agent_process, f"worker-{n}", url, chaos_exchange, env) for n in range(2)]
    await asyncio.gather(*(worker.started() for worker in workers))
    client = await open_bus(url, **FAST)
    producer = Producer(client, ledger)
    queue = _queue(chaos_exchange)
    closes, began = 6, time.monotonic()
    async with steady_traffic(producer, lanes=8, limit=5000, seconds=0.2, timeout=30) as ended:
        for _ in range(closes):
            await _more(ended, 50)
            await asyncio.to_thread(private_broker.close_connections)
            await consumers_back(url, queue, 2, RECONNECT + 5)
    await _stop(*workers)
    report = await ledger.check(url=url, queues=[queue])

    _show(
        "keyed traffic, forced closes, shared store",
        report,
        closes=closes,
        seconds=round(time.monotonic() - began, 1),
        publish_retries=client.stats.publish_retries,
    )
    _assert_nothing_lost(report, producer.calls)
    assert report.duplicated == {}, "an effect ran twice"
    assert report.endings == {"response": producer.calls}, "every request answered"


async def _more(ended: Callable[[], int], count: int) -> None:
    floor = ended() + count
    await wait_for(lambda: ended() >= floor, 30, f"{count} more requests to end")


def _agents(ledger: Ledger) -> set[str]:
    return {agent for _, agent in ledger.effects()}


def _queue(exchange: str) -> str:
    return Topology(exchange).service_queue(SERVICE)
