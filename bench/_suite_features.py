"""suite.py's feature sections, each against its own baseline in the same run."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

import aio_pika

import _harness as harness
import agentbus
from agentbus import InputRequired, PlanClient, Unroutable
from agentbus.bus import Topology
from agentbus.envelopes import EventEnvelope
from agentbus.leader import SCHEDULE_FIRED

MiB = 1024 * 1024
WINDOW = 8  # 1 MiB messages in flight, as the artifact store's writer and reader keep them
CLIENT = "bench-client"
LEADERS = ("leader-1", "leader-2")


def _ms(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50_ms": statistics.median(values) * 1e3, "p90_ms": cuts[89] * 1e3,
            "p99_ms": cuts[98] * 1e3, "max_ms": max(values) * 1e3}  # fmt: skip


def run_questions(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    exchange = harness.exchange_name("questions")
    ids = [f"echo-{n}" for n in range(3)]
    figures: dict[str, dict[str, Any]] = {}
    with harness.Fleet(url) as fleet:
        topology = fleet.topology(exchange, ["echo"], [*ids, CLIENT])
        fleet.queues.append(topology.conversations("echo"))
        for agent_id, action in zip(ids, ("round trips", "plain", "asks"), strict=True):
            say(f"questions: {action}")
            agent = fleet.agentbus(exchange, "run", "_bench_agents:Echo", "--id", agent_id)
            run = _round_trips(fleet, exchange, cfg.rounds) if action == "round trips" else (
                _memory(fleet, exchange, agent, action, cfg.questions))  # fmt: skip
            for name, row in asyncio.run(run).items():  # a row's figures from both runs
                figures.setdefault(name, {}).update(row)
            fleet.retire(agent)
    plain, asks = figures["plain request"], figures["asked and answered"]
    ratios = {"asked / plain p50": asks["p50_ms"] / plain["p50_ms"],
              "added p50 ms": asks["p50_ms"] - plain["p50_ms"],
              "open question / plain request, B": asks["B_each"] / plain["B_each"]}  # fmt: skip
    return {"params": vars(cfg), "figures": figures, "ratios": ratios}


async def _round_trips(fleet: harness.Fleet, exchange: str, rounds: int) -> dict[str, Any]:
    plain: list[float] = []
    asked: list[float] = []
    async with agentbus.connect(fleet.url, exchange=exchange, agent_id=CLIENT) as bus:
        await fleet.wait(lambda: harness.answers(bus, "echo"), "the echo agent")
        for n in range(rounds):  # interleaved: both see the same host
            began = time.perf_counter()
            await bus.request("echo", "echo", {"n": n}, timeout=10)
            plain.append(time.perf_counter() - began)
            began = time.perf_counter()
            try:
                await bus.request("echo", "asks", {"n": n}, timeout=10)
            except InputRequired as question:
                await bus.answer(question.question, 1, timeout=10)
            asked.append(time.perf_counter() - began)
    skip = rounds // 10  # warm-up
    return {"plain request": _ms(plain[skip:]), "asked and answered": _ms(asked[skip:])}


async def _memory(
    fleet: harness.Fleet, exchange: str, agent: harness.Proc, action: str, count: int
) -> dict[str, Any]:
    skill = "echo" if action == "plain" else "asks"

    async def one(bus: agentbus.Bus, n: int) -> None:
        with contextlib.suppress(InputRequired):  # left open: what is measured
            await bus.request("echo", skill, {"n": n}, timeout=30)

    async with agentbus.connect(fleet.url, exchange=exchange, agent_id=CLIENT) as bus:
        await fleet.wait(lambda: harness.answers(bus, "echo"), "the echo agent")
        for n in range(200):  # warm-up: imports, caches, the journal's channel
            await one(bus, n)
        before = harness.rss(agent.pid) or 0
        for start in range(0, count, 100):
            await asyncio.gather(*(one(bus, n) for n in range(start, start + 100)))
        after = harness.rss(agent.pid) or 0
    name = "plain request" if action == "plain" else "asked and answered"
    return {name: {"RSS_before_MB": before / 2**20, "RSS_after_MB": after / 2**20,
                   "B_each": (after - before) / count}}  # fmt: skip


def run_maps(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    exchange = harness.exchange_name("maps")
    runs: dict[str, list[dict[str, float]]] = {"fixed plan": [], "mapped step": []}
    with harness.Fleet(url) as fleet:
        topology = fleet.topology(exchange, ["echo", "leader"], ["echo-1", CLIENT], leaders=True)
        fleet.agentbus(exchange, "run", "_bench_agents:Echo", "--id", "echo-1")
        for k in range(cfg.rounds):  # interleaved, each on a fresh leader
            for kind in ("fixed plan", "mapped step"):
                say(f"maps: {kind}, round {k + 1}")
                leader_id = f"leader-{uuid.uuid4().hex[:6]}"
                fleet.queues.append(topology.instance_queue(leader_id))
                leader = fleet.agentbus(exchange, "leader", "--id", leader_id)
                runs[kind].append(asyncio.run(_plan(fleet, exchange, leader, kind, cfg.items)))
                fleet.retire(leader)
    figures = {kind: {"per_s": max(r["per_s"] for r in found),
                      "RSS_B_per_item": min(r["rss"] for r in found)}
               for kind, found in runs.items()}  # fmt: skip
    ratio = figures["mapped step"]["per_s"] / figures["fixed plan"]["per_s"]
    return {"params": vars(cfg), "figures": figures, "ratios": {"map / fixed, per s": ratio}}


def _plan_of(kind: str, count: int) -> dict[str, Any]:
    echo = {"skill": "echo", "service": "echo"}
    if kind == "fixed plan":
        steps = [{"id": f"s{n}", **echo, "parameters": {"n": n}} for n in range(count)]
        return {"id": f"fixed-{uuid.uuid4().hex[:6]}", "subtasks": steps, "max_parallel": 64}
    numbers = {"id": "n", "skill": "numbers", "service": "echo", "parameters": {"count": count}}
    mapped = {"id": "m", **echo, "depends_on": ["n"],
              "map": {"over": "n", "as": "n", "concurrency": 64}}  # fmt: skip
    return {"id": f"map-{uuid.uuid4().hex[:6]}", "subtasks": [numbers, mapped]}


async def _plan(
    fleet: harness.Fleet, exchange: str, leader: harness.Proc, kind: str, count: int
) -> dict[str, float]:
    async with agentbus.connect(fleet.url, exchange=exchange, agent_id=CLIENT) as bus:
        await fleet.wait(lambda: harness.answers(bus, "echo"), "the echo agent")
        await fleet.wait(lambda: harness.answers(bus, "leader"), "the leader")
        before = harness.reset_peak_rss(leader.pid)
        began = time.perf_counter()
        aggregate = await PlanClient(bus).run(_plan_of(kind, count), timeout=900)
        seconds = time.perf_counter() - began
        peak = harness.rss(leader.pid, "VmHWM") or 0
    if aggregate.status.value != "completed":
        raise RuntimeError(f"{kind}: {aggregate.status.value}")
    return {"per_s": count / seconds, "rss": (peak - before) / count}


def run_artifacts(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    from agentbus.testing.chaos import PrivateBroker

    figures: dict[str, dict[str, Any]] = {}
    for chunk in cfg.chunks:
        for size in cfg.sizes:
            say(f"artifacts: {size} MiB in {chunk} KiB chunks")
            with PrivateBroker("agentbus-bench-artifacts") as broker:  # a fresh node each
                row = _transfer(broker, size * MiB, chunk * 1024)
            figures[f"{size} MiB, {chunk} KiB chunks"] = row
    ratios = {f"{name}: {side} / raw": row[f"{side}_MiB_s"] / row[f"raw_{side}_MiB_s"]
              for name, row in figures.items() for side in ("put", "read")}  # fmt: skip
    return {"params": vars(cfg), "figures": figures, "ratios": ratios}


def _transfer(broker: Any, size: int, chunk: int) -> dict[str, Any]:
    def end(role: str, ref: str | None = None) -> dict[str, Any]:
        env = {"AGENTBUS_URL": broker.url, "AGENTBUS_ARTIFACT_CHUNK_SIZE": str(chunk)}
        argv = [sys.executable, str(harness.BENCH_DIR / "_bench_agents.py"), "artifact", role]
        with harness.Fleet() as fleet:
            proc = fleet.spawn(role, role, [*argv, str(size), *([ref] if ref else [])],
                               pipes=True, env=env)  # fmt: skip
            return dict(json.loads(proc.readline(timeout=3600)))

    memory0, disk0 = _broker_cost(broker)
    wrote = end("write")
    memory1, disk1 = _broker_cost(broker)
    read = end("read", wrote["ref"])
    if read["sha256"] != json.loads(wrote["ref"])["sha256"]:
        raise RuntimeError("the digests differ")
    raw_write, raw_read = end("raw-write"), end("raw-read")
    mib = size / MiB
    return {"put_MiB_s": mib / wrote["seconds"], "read_MiB_s": mib / read["seconds"],
            "raw_put_MiB_s": mib / raw_write["seconds"],
            "raw_read_MiB_s": mib / raw_read["seconds"],
            "writer_peak_growth_MiB": wrote["peak_growth"] / MiB,
            "reader_peak_growth_MiB": read["peak_growth"] / MiB,
            "broker_memory_growth_MiB": (memory1 - memory0) / MiB,
            "broker_disk_B_per_B": (disk1 - disk0) / size}  # fmt: skip


def _broker_cost(broker: Any) -> tuple[int, int]:
    """The node's memory and its streams' segment files on disk, in bytes."""
    status = json.loads(broker.rabbitmqctl("status", "--formatter", "json"))
    on_disk = sum(p.stat().st_size for p in (Path(broker.directory) / "mnesia").rglob("*.segment"))
    return int(status["memory"]["total"]["rss"]), on_disk


async def _data(size: int) -> AsyncIterator[bytes]:
    block, sent = os.urandom(MiB), 0
    while sent < size:
        yield block[: min(MiB, size - sent)]
        sent += MiB


def artifact_end(role: str, size: int, ref: str | None) -> None:
    """One end of a transfer (``_bench_agents.py artifact``): its figures as a JSON line."""
    pid = os.getpid()
    before = harness.reset_peak_rss(pid)
    end = _raw(role, size) if role.startswith("raw-") else _artifact(role, size, ref)
    result = asyncio.run(end)
    result["peak_growth"] = (harness.rss(pid, "VmHWM") or 0) - before
    print(json.dumps(result), flush=True)


async def _artifact(role: str, size: int, ref: str | None) -> dict[str, Any]:
    async with agentbus.connect(agent_id="bench-1", exchange="bench") as bus:
        result: dict[str, Any] = {}
        started = time.perf_counter()
        if role == "write":
            stored = await bus.artifacts.put(_data(size), name="bench.bin", reader="bench")
            result["ref"] = stored.model_dump_json()
        else:
            digest = hashlib.sha256()
            async for chunk in bus.artifacts.open(agentbus.Artifact.model_validate_json(ref or "")):
                digest.update(chunk)
            result["sha256"] = digest.hexdigest()
        result["seconds"] = time.perf_counter() - started
    return result


async def _raw(role: str, size: int) -> dict[str, Any]:
    import aiormq

    connection = await aiormq.connect(agentbus.Settings().url)
    channel = await connection.channel()
    await channel.queue_declare("bench.raw", durable=True, arguments={"x-queue-type": "stream"})
    started = time.perf_counter()  # connected: the transfer alone is timed, as above
    if role == "raw-write":
        await channel.confirm_delivery()
        slots, sent = asyncio.Semaphore(WINDOW), []

        async def one(body: bytes) -> None:
            try:
                await channel.basic_publish(body, routing_key="bench.raw")
            finally:
                slots.release()

        async for body in _data(size):
            await slots.acquire()
            sent.append(asyncio.ensure_future(one(body)))
        await asyncio.gather(*sent)
    else:
        done, got = asyncio.get_running_loop().create_future(), [0]

        async def take(message: Any) -> None:
            got[0] += len(message.body)
            await channel.basic_ack(message.delivery.delivery_tag)
            if got[0] >= size and not done.done():
                done.set_result(None)

        await channel.basic_qos(prefetch_count=WINDOW)
        await channel.basic_consume("bench.raw", take, arguments={"x-stream-offset": "first"})
        await done
    seconds = time.perf_counter() - started
    await connection.close()
    return {"seconds": seconds}


def run_schedules(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    exchange = harness.exchange_name("schedules")
    with harness.Fleet(url) as fleet:
        topology = fleet.topology(exchange, ["leader"], [*LEADERS, CLIENT], leaders=True)
        leaders = {n: fleet.agentbus(exchange, "leader", "--id", n) for n in LEADERS}
        say(f"schedules: {cfg.minutes:g} min, the ticking leader killed halfway")
        ticks = asyncio.run(_ticks(fleet, topology, leaders, cfg.minutes))
    counts = Counter(message_id for message_id, _ in ticks["arrived"])
    times = sorted({_tick(message_id) for message_id in counts})
    expected = round(times[-1] - times[0]) + 1 if times else 0
    arrival = [at - _tick(message_id) for message_id, at in ticks["arrived"]]
    figures = {"ticks": {"arrived": len(times), "expected": expected,
                         "twice": sum(1 for n in counts.values() if n > 1)},
               "lag, the ticking leader's": _ms(ticks["fired"]),
               "lag, at arrival": _ms(arrival)}  # fmt: skip
    once = len(times) == expected and all(n == 1 for n in counts.values())
    params = {"minutes": cfg.minutes, "killed": ticks["killed"], "once_each": once}
    return {"params": params, "figures": figures, "ratios": {}}


def _tick(message_id: str) -> float:
    label = message_id.rsplit("-", 1)[1]
    return datetime.strptime(label, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


async def _ticks(
    fleet: harness.Fleet, topology: Topology, leaders: dict[str, harness.Proc], minutes: float
) -> dict[str, Any]:
    arrived: list[tuple[str, float]] = []
    fired: list[float] = []
    holder: list[str] = []
    async with await aio_pika.connect(fleet.url) as connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(topology.exchange, "topic", durable=True)
        queue = await channel.declare_queue(exclusive=True)  # every copy sent arrives here
        await queue.bind(exchange, routing_key="agent.tickrec.request")

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            arrived.append((str(message.message_id), time.time()))
            await message.ack()

        async def on_fired(event: EventEnvelope) -> None:
            holder.append(event.sender_id)  # the leader that ticks
            if (lag := event.payload.event_data.get("lag")) is not None:
                fired.append(float(lag))

        await queue.consume(take)
        async with agentbus.connect(fleet.url, exchange=topology.exchange, agent_id=CLIENT) as bus:
            await bus.subscribe(f"broadcast.event.{SCHEDULE_FIRED}", on_fired)
            plans = PlanClient(bus)
            request = {"service": "tickrec", "action": "record"}
            schedule = {"name": "bench", "every": 1, "missed": "all", "request": request}
            for _ in range(600):  # the leaders start: their queue is not there yet
                with contextlib.suppress(Unroutable):
                    await plans.add_schedule(schedule, timeout=60)
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(minutes * 30)  # the first half, ticking
            victim = holder[-1]
            leaders[victim].popen.send_signal(signal.SIGKILL)
            fleet.retire(leaders[victim])
            killed = f"{victim} at {datetime.now(UTC).isoformat(timespec='seconds')}"
            fleet.agentbus(topology.exchange, "leader", "--id", victim)
            await asyncio.sleep(minutes * 30)  # the second half
            await plans.remove_schedule("bench", timeout=30)
            await asyncio.sleep(2)  # the last runs on their way arrive
    return {"arrived": arrived, "fired": fired, "killed": killed}
