"""Request/response for suite.py and the peers agentbus is measured against (also in fan-out):
processes ``_suite_rr.py serve SIDE URL EXCHANGE ID PREFETCH``, ``client SIDE URL EXCHANGE ID``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from importlib import import_module
from types import SimpleNamespace as Config
from typing import Any

import aio_pika
import aiormq.abc
import orjson
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from faststream.rabbit import Channel, RabbitBroker, RabbitQueue

import _harness as harness
import agentbus
from _bench_agents import Pinger, UvPinger, echo
from agentbus import Metrics, Settings
from agentbus.bus import Topology

ROUTING_KEY = "raw.work.request"
DIRECT_REPLY = "amq.rabbitmq.reply-to"
REPLY_PREFETCH = 512  # the agentbus instance queue's prefetch
JSON = "application/json"
WORK = {"ping": lambda p: p, "echo": lambda p: int(p["n"]),
        "total": lambda p: sum(int(value) for value in p["values"])}  # fmt: skip


def envelope(kind: str, sender: str, payload: Any, **metadata: Any) -> dict[str, Any]:
    """An agentbus envelope's fields, as a hand-rolled peer sends them, without the models."""
    return {"protocol_version": "1.0", "message_id": str(uuid.uuid4()),
            "timestamp": datetime.now(UTC), "sender_id": sender,
            "receiver_id": metadata.pop("receiver", "echo"), "metadata": metadata,
            "message_type": kind, "payload": payload}  # fmt: skip


def reply_fields(request: dict[str, Any], sender: str) -> dict[str, Any]:
    """The response envelope's fields to a request, as agentbus sends them."""
    action, parameters = request["payload"]["action"], request["payload"].get("parameters") or {}
    work = WORK.get(action)
    error = None if work else {"code": "unknown_action", "message": f"no action {action!r}"}
    answer = {"status": "error" if error else "success", "error": error,
              "result": work(parameters) if work else None}  # fmt: skip
    return envelope("response", sender, answer, receiver=request["sender_id"],
                    correlation_id=request["message_id"])  # fmt: skip


class Pending:
    """Requests awaiting their reply, by correlation id."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[Any]] = {}

    def resolve(self, correlation_id: str | None, value: Any) -> None:
        future = self._futures.get(correlation_id or "")
        if future is not None and not future.done():
            future.set_result(value)

    async def wait(self, key: str, send: Any, timeout: float) -> Any:
        """Send (an awaitable), then wait for the reply to ``key``, all within ``timeout``."""
        self._futures[key] = future = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await send
                return await future
        finally:
            del self._futures[key]


class Asker:
    """A hand-rolled requester: ``call`` sends an envelope's fields and returns the reply's."""

    sender = "asker"
    call: Callable[[dict[str, Any]], Awaitable[Any]]  # each subclass's own

    async def ping(self, i: int) -> Any:
        """The request/response payload every side sends: ``ping`` with ``{"i": i}``."""
        payload = {"action": "ping", "parameters": {"i": i}}
        return await self.call(envelope("request", self.sender, payload))

    async def request(self, action: str, parameters: dict[str, Any], subtask: str) -> Any:
        """One subtask of the fan-out, metadata as agentbus's leader sends; its result."""
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        payload = {"action": action, "parameters": parameters}
        reply = await self.call(envelope("request", self.sender, payload, deadline=deadline,
                                         plan_id="raw-plan", subtask_id=subtask))  # fmt: skip
        if reply["payload"]["status"] != "success":
            raise RuntimeError(f"{action} failed: {reply['payload']['error']}")
        return reply["payload"]["result"]

    async def run(self, n: int, window: int) -> dict[str, Any]:
        """N ``echo`` requests with at most ``window`` in flight, then the fan-in ``total``."""
        results: list[Any] = [None] * n
        numbers = iter(range(n))

        async def lane() -> None:
            for i in numbers:
                results[i] = await self.request("echo", {"n": i}, f"t{i}")

        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(min(window, n))))
        total = await self.request("total", {"values": results}, "sum")
        seconds = time.perf_counter() - start
        if total != n * (n - 1) // 2:
            raise RuntimeError(f"fan-out wrong: sum={total}")
        return {"seconds": seconds, "per_s": n / seconds}


class _Connected:
    url: str
    _connection: AbstractConnection | None = None

    async def _connect(self) -> AbstractConnection:
        self._connection = await aio_pika.connect_robust(self.url)
        return self._connection

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()


class RawServer(_Connected):
    """Serves a durable queue bound to ``exchange`` with ``raw.work.request``."""

    def __init__(self, url: str, exchange: str, queue: str, prefetch: int, sender: str) -> None:
        self.url, self.exchange, self.queue = url, exchange, queue
        self.prefetch, self.sender = prefetch, sender

    async def open(self) -> None:
        connection = await self._connect()
        self._replies = (await connection.channel(publisher_confirms=True)).default_exchange
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        topic = await channel.declare_exchange(self.exchange, "topic", durable=True)
        queue = await channel.declare_queue(self.queue, durable=True)
        await queue.bind(topic, routing_key=ROUTING_KEY)
        await queue.consume(self._serve)

    async def _serve(self, incoming: AbstractIncomingMessage) -> None:
        reply = reply_fields(orjson.loads(incoming.body), self.sender)
        out = aio_pika.Message(orjson.dumps(reply), content_type=JSON,
                               message_id=reply["message_id"],
                               correlation_id=incoming.correlation_id,
                               delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT)  # fmt: skip
        returned = await self._replies.publish(out, incoming.reply_to or "", mandatory=True)
        if isinstance(returned, aiormq.abc.DeliveredMessage):  # the requester has gone
            print(f"{self.sender}: reply unroutable", file=sys.stderr)
        await incoming.ack()


class RawClient(Asker, _Connected):
    """Requests to a ``RawServer``'s exchange, replies on ``reply_queue``."""

    def __init__(self, url: str, exchange: str, reply_queue: str, timeout: float) -> None:
        self.url, self.exchange_name, self.reply_queue = url, exchange, reply_queue
        self.timeout, self.sender = timeout, f"raw-{uuid.uuid4().hex[:6]}"
        self._pending = Pending()

    async def open(self) -> None:
        connection = await self._connect()
        publish = await connection.channel(publisher_confirms=True)
        self._exchange = await publish.declare_exchange(self.exchange_name, "topic", durable=True)
        consume = await connection.channel()
        await consume.set_qos(prefetch_count=REPLY_PREFETCH)
        replies = await consume.declare_queue(self.reply_queue, durable=False,
                                              arguments={"x-expires": 60_000})  # fmt: skip
        await replies.consume(self._on_reply)

    async def _on_reply(self, incoming: AbstractIncomingMessage) -> None:
        self._pending.resolve(incoming.correlation_id, orjson.loads(incoming.body))
        await incoming.ack()

    async def _send(self, out: aio_pika.Message) -> None:
        returned = await self._exchange.publish(out, ROUTING_KEY, mandatory=True)
        if isinstance(returned, aiormq.abc.DeliveredMessage):
            raise RuntimeError(f"unroutable: no queue bound to {self.exchange_name}")

    async def call(self, fields: dict[str, Any]) -> Any:
        key = fields["message_id"]
        out = aio_pika.Message(orjson.dumps(fields), content_type=JSON, message_id=key,
                               correlation_id=key, reply_to=self.reply_queue,
                               expiration=self.timeout,
                               delivery_mode=aio_pika.DeliveryMode.PERSISTENT)  # fmt: skip
        return await self._pending.wait(key, self._send(out), self.timeout)


class MinimalRpc(_Connected):
    """One queue, direct reply-to, JSON in and out: ``serve()``, or ``open()`` and ``ping``."""

    def __init__(self, url: str, queue: str, prefetch: int = 64, timeout: float = 5.0) -> None:
        self.url, self.queue, self.prefetch, self.timeout = url, queue, prefetch, timeout
        self._pending = Pending()

    async def _channel(self) -> aio_pika.abc.AbstractChannel:
        channel = await (await self._connect()).channel(publisher_confirms=False)
        self._exchange = channel.default_exchange
        return channel

    async def serve(self) -> None:
        channel = await self._channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        queue = await channel.declare_queue(self.queue, durable=False, auto_delete=True)
        await queue.consume(self._serve)

    async def open(self) -> None:
        replies = await (await self._channel()).get_queue(DIRECT_REPLY, ensure=False)
        await replies.consume(self._on_reply, no_ack=True)

    async def _serve(self, incoming: AbstractIncomingMessage) -> None:
        body = orjson.dumps({"result": orjson.loads(incoming.body)["parameters"]})
        reply = aio_pika.Message(body, correlation_id=incoming.correlation_id, content_type=JSON)
        await self._exchange.publish(reply, routing_key=incoming.reply_to or "", mandatory=False)
        await incoming.ack()

    async def _on_reply(self, incoming: AbstractIncomingMessage) -> None:
        self._pending.resolve(incoming.correlation_id, orjson.loads(incoming.body)["result"])

    async def ping(self, i: int) -> Any:
        key = uuid.uuid4().hex
        body = orjson.dumps({"action": "ping", "parameters": {"i": i}})
        out = aio_pika.Message(body, correlation_id=key, reply_to=DIRECT_REPLY, content_type=JSON)
        return await self._pending.wait(key, self._exchange.publish(out, self.queue), self.timeout)


class _Broker:
    def __init__(self, url: str) -> None:
        self.broker = RabbitBroker(url, logger=None)

    async def open(self) -> None:
        await self.broker.start()

    async def close(self) -> None:
        await self.broker.stop()


class FastStreamServer(_Broker):
    def __init__(self, url: str, queue: str, prefetch: int, sender: str) -> None:
        super().__init__(url)
        channel = Channel(prefetch_count=prefetch)

        @self.broker.subscriber(RabbitQueue(queue, durable=True), channel=channel)
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return reply_fields(body, sender)


class FastStreamClient(Asker, _Broker):
    """As a FastStream user asks, and fans out: ``asyncio.gather`` over ``broker.request``."""

    def __init__(self, url: str, queue: str, timeout: float) -> None:
        super().__init__(url)
        self.queue, self.timeout, self.sender = queue, timeout, f"fs-{uuid.uuid4().hex[:6]}"

    async def call(self, fields: dict[str, Any]) -> Any:
        reply = await self.broker.request(
            fields, queue=self.queue, persist=True, mandatory=True, timeout=self.timeout,
            message_id=fields["message_id"], expiration=self.timeout,
        )  # fmt: skip
        return await reply.decode()


BUS_SIDES = ("agentbus", "agent", "agent-transient", "agent-uvloop")
SIDES = (*BUS_SIDES, "aio-pika", "raw-min", "faststream")
SERVERS = {side: side for side in SIDES} | {"agent-transient": "agent"}  # side: the server it asks
Call = harness.Call
SCRIPT = str(harness.BENCH_DIR / "_suite_rr.py")
WARMUP, PREFETCH, TIMEOUT = 200, 64, 5.0


class Names:
    """The queues and exchanges of the peers on one exchange (the fan-out's too)."""

    def __init__(self, exchange: str) -> None:
        self.exchange, self.raw_exchange = exchange, f"{exchange}.raw"
        bus = Topology(exchange)
        self.queues = {"agentbus": bus.service_queue("echo"),
                       "agent": bus.service_queue(Pinger.name),
                       "agent-uvloop": bus.service_queue(UvPinger.name),
                       "aio-pika": f"{exchange}.raw.work", "raw-min": f"{exchange}.min.echo",
                       "faststream": f"{exchange}.fs.work"}  # fmt: skip

    def reply(self, client: str) -> str:
        return f"{self.exchange}.raw.reply.{client}"

    def clean(self, fleet: harness.Fleet, clients: list[str], services: tuple[str, ...],
              agents: list[str], leaders: bool = False) -> None:  # fmt: skip
        """Have ``fleet`` delete them, these clients' replies, services' and agents' queues."""
        fleet.topology(self.exchange, services, agents, leaders)
        fleet.queues += [self.queues[s] for s in ("aio-pika", "raw-min", "faststream")]
        fleet.queues += [self.reply(client) for client in clients]
        fleet.exchanges.append(self.raw_exchange)


async def serve(side: str, url: str, names: Names, agent_id: str, prefetch: int) -> None:
    """One side's server, until SIGTERM."""
    stop, settings = harness.stop_event(), Settings(url=url, exchange=names.exchange)
    queue = names.queues[side]
    async with contextlib.AsyncExitStack() as stack:
        if side == "agentbus":
            bus = await stack.enter_async_context(agentbus.Bus(settings, agent_id=agent_id))
            await bus.serve(echo, service="echo", prefetch=prefetch)
        elif side in ("agent", "agent-uvloop"):
            kind = Pinger if side == "agent" else UvPinger
            pinger = kind(agent_id=agent_id, settings=settings, metrics=Metrics())
            await stack.enter_async_context(pinger)
        elif side == "raw-min":
            await (minimal := MinimalRpc(url, queue, prefetch)).serve()
            stack.push_async_callback(minimal.close)
        elif side == "aio-pika":
            await (raw := RawServer(url, names.raw_exchange, queue, prefetch, agent_id)).open()
            stack.push_async_callback(raw.close)
        else:
            await (fs := FastStreamServer(url, queue, prefetch, agent_id)).open()
            stack.push_async_callback(fs.close)
        await stop.wait()


@contextlib.asynccontextmanager
async def connected(side: str, url: str, names: Names, client_id: str) -> AsyncIterator[Call]:
    """A connected client of ``side``: ``await call(i)`` is one request/response."""
    if side in BUS_SIDES:  # its own id: two buses on one instance queue take each other's replies
        agent_id = f"rr-{side}-{client_id}"
        async with agentbus.connect(url, exchange=names.exchange, agent_id=agent_id) as bus:
            receiver = {"agentbus": "echo", "agent-uvloop": UvPinger.name}.get(side, Pinger.name)
            action = "ping" if side == "agentbus" else "answer"
            persistent = side != "agent-transient"

            async def call(i: int) -> Any:
                reply = await bus.request(receiver, action, {"i": i}, timeout=TIMEOUT,
                                          persistent=persistent)  # fmt: skip
                return reply.result

            yield call
        return
    queue = names.queues[SERVERS[side]]
    peer = {"raw-min": lambda: MinimalRpc(url, queue, timeout=TIMEOUT),
            "aio-pika": lambda: RawClient(url, names.raw_exchange, names.reply(client_id), TIMEOUT),
            "faststream": lambda: FastStreamClient(url, queue, TIMEOUT)}[side]()  # fmt: skip
    await peer.open()
    try:
        yield peer.ping
    finally:
        await peer.close()


async def client(side: str, url: str, exchange: str, client_id: str) -> None:
    """A client process: ``ready``, then a JSON line for each ``latency N`` or ``load S W``."""
    async with connected(side, url, Names(exchange), client_id) as call:
        await harness.sequential(call, 0, warmup=WARMUP)
        print("ready", flush=True)
        while command := (await asyncio.to_thread(sys.stdin.readline)).split():
            if command[0] == "load":
                out = await harness.windowed(call, int(command[2]), float(command[1]))
            else:
                gc.collect()
                cpu0 = time.process_time()
                samples = await harness.sequential(call, int(command[1]))
                out = {"samples": samples, "cpu_s": time.process_time() - cpu0}
            print(json.dumps(out), flush=True)


def clients(fleet: harness.Fleet, side: str, url: str, names: Names, ids: list[str]) -> list:
    """Client processes of ``side``, one per id, ready."""
    procs = [fleet.spawn("client", f"{side} client {client_id}",
                         [sys.executable, SCRIPT, "client", side, url, names.exchange, client_id],
                         pipes=True) for client_id in ids]  # fmt: skip
    for proc in procs:
        if proc.readline(harness.READY_TIMEOUT) != "ready":
            raise RuntimeError(f"{proc.name} did not say ready")
    return procs


def latency_rounds(url: str, names: Names, cfg: Config, pids: dict[str, int],
                   say: harness.Say) -> dict[str, list[dict[str, float]]]:  # fmt: skip
    """Every side's client started and warmed up; then short rounds, the sides in turn."""
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in cfg.sides}
    with harness.Fleet() as remote:
        procs = {side: clients(remote, side, url, names, ["lat"])[0] for side in cfg.sides}
        for k in range(cfg.rounds):
            for side, proc in procs.items():
                server0 = harness.cpu_seconds(pids[side])
                proc.send(f"latency {cfg.requests}")
                row, per = json.loads(proc.readline(cfg.requests * TIMEOUT)), 1e6 / cfg.requests
                server_us = (harness.cpu_seconds(pids[side]) - server0) * per
                cpu = {"client_cpu_us": row["cpu_s"] * per, "server_cpu_us": server_us}
                rows[side].append(harness.summary(row["samples"]) | cpu)
                figures = ", ".join(f"{key} {v:.0f}" for key, v in rows[side][-1].items())
                say(f"request/response latency {side} #{k + 1}: {figures}")
    return rows


def load_run(side: str, url: str, names: Names, procs: int, cfg: Config, pid: int) -> dict:
    """``procs`` client processes of ``side``, started together; requests per second."""
    with harness.Fleet() as fleet:
        started = clients(fleet, side, url, names, [f"c{k}" for k in range(procs)])
        cpu0 = harness.cpu_seconds(pid)
        for proc in started:
            proc.send(f"load {cfg.seconds} {cfg.window}")
        rows = [json.loads(proc.readline(cfg.seconds + 60)) for proc in started]
        server_cpu = harness.cpu_seconds(pid) - cpu0
    count = sum(row["count"] for row in rows)
    per = 1e6 / max(count, 1)
    return {"per_s": sum(row["per_s"] for row in rows), "count": count,
            "server_cpu_us": server_cpu * per, "client_cpu_us": sum(r["cpu_s"] for r in rows) * per,
            "errors": [error for row in rows for error in row["errors"]]}  # fmt: skip


def run_rr(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    """Latency rounds, then throughput rounds with 1 and 4 client processes, every side."""
    names = Names(f"bench-suite-{uuid.uuid4().hex[:8]}")
    load: dict[str, dict[str, list[dict[str, Any]]]] = {}
    servers = sorted({SERVERS[side] for side in cfg.sides})
    ids = {"agentbus": "rr-server", "agent": "rr-agent", "agent-uvloop": "rr-agent-uv"}
    with harness.Fleet(url) as fleet:
        client_ids = ["lat", *(f"c{k}" for k in range(max(cfg.procs)))]
        agents = [*ids.values(), *(f"rr-{side}-{c}" for side in BUS_SIDES for c in client_ids)]
        names.clean(fleet, client_ids, ("echo", Pinger.name, UvPinger.name), agents)
        for server in servers:
            argv = [sys.executable, SCRIPT, "serve", server, url, names.exchange]
            argv += [ids.get(server, "rr-peer"), str(PREFETCH)]
            fleet.spawn(server, f"{server} server", argv)
        asyncio.run(fleet.consumed([names.queues[server] for server in servers]))
        pids = {side: fleet.pids(SERVERS[side])[0] for side in cfg.sides}
        latency = latency_rounds(url, names, cfg, pids, say)
        for procs in cfg.procs:
            load[str(procs)] = {side: [] for side in cfg.sides}
            for k in range(cfg.load_rounds):
                for side in cfg.sides:
                    row = load_run(side, url, names, procs, cfg, pids[side])
                    load[str(procs)][side].append(row)
                    say(f"request/response throughput {side} x{procs} #{k + 1}: {row}")
    table: dict[str, dict[str, Any]] = {}
    best = harness.best_median
    for side in cfg.sides:
        keys = ("p50_us", "p99_us", "client_cpu_us", "server_cpu_us")
        table[side] = {key: best(row[key] for row in latency[side]) for key in keys}
        for procs, sides in load.items():
            table[side][f"per_s_x{procs}"] = best((r["per_s"] for r in sides[side]), max)
            table[side][f"server_cpu_us_x{procs}"] = best(r["server_cpu_us"] for r in sides[side])
    out = {"exchange": names.exchange, "params": vars(cfg), "latency": latency}
    return out | {"throughput": load, "summary": table}


if __name__ == "__main__":
    harness.quiet_logging()
    command, side, url, exchange, *rest = sys.argv[1:]
    # asyncio's own loop, whatever is installed; agent-uvloop: the fast extra's
    factory: Any = import_module("uvloop").new_event_loop if side == "agent-uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        if command == "serve":
            runner.run(serve(side, url, Names(exchange), rest[0], int(rest[1])))
        else:
            runner.run(client(side, url, exchange, rest[0]))
