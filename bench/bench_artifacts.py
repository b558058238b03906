"""What artifacts cost: throughput against the broker's raw stream rate, RSS, broker disk.

On a private RabbitMQ node of its own (the shared one is left alone), for each size: a
writer process stores an artifact (``bus.artifacts.put``, chunks from a generator), a
reader process reads it back checked (``bus.artifacts.open``); then the same bytes as
plain 1 MiB messages, published with the same confirm window and consumed with the
same prefetch (aiormq, no agentbus), as the baseline. Each end is its own process, so
its peak RSS (VmHWM from /proc, reset before the transfer) is its own. The broker's cost
is its memory (``rabbitmqctl status``) and the stream's segment files on disk.

    .venv/bin/python bench/bench_artifacts.py                   # 1 MiB, 100 MiB, 1 GiB
    .venv/bin/python bench/bench_artifacts.py --sizes 1 100     # MiB
    .venv/bin/python bench/bench_artifacts.py --chunks 64 128 1024 --sizes 100  # KiB
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
WINDOW = 8  # 1 MiB messages in flight, as the store's writer and reader keep them


def _peak_kib() -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


async def _data(size: int) -> AsyncIterator[bytes]:
    block, sent = os.urandom(MiB), 0
    while sent < size:
        yield block[: min(MiB, size - sent)]
        sent += MiB


async def _role(role: str, url: str, size: int, ref: str | None) -> dict[str, Any]:
    """One end of one transfer, in this process; the figures as a dict."""
    import agentbus

    _reset_peak()
    rss, _ = _peak_kib()
    if role in ("raw-write", "raw-read"):
        result = await _raw(role, url, size)
    else:
        async with agentbus.connect(url, agent_id="bench-1", exchange="bench") as bus:
            result = {"started": time.perf_counter()}
            if role == "write":
                art = await bus.artifacts.put(_data(size), name="bench.bin", reader="bench")
                result["ref"] = art.model_dump_json()
            else:
                digest = hashlib.sha256()
                async for chunk in bus.artifacts.open(agentbus.Artifact.model_validate_json(ref)):
                    digest.update(chunk)
                result["sha256"] = digest.hexdigest()
            result["ended"] = time.perf_counter()
    seconds = result.pop("ended") - result.pop("started")
    return {**result, "seconds": seconds, "rss_kib": rss, "peak_kib": _peak_kib()[1]}


async def _raw(role: str, url: str, size: int) -> dict[str, Any]:
    import aiormq

    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.queue_declare("bench.raw", durable=True, arguments={"x-queue-type": "stream"})
    started = time.perf_counter()  # connected: the transfer alone is timed, as above
    if role == "raw-write":
        slots = asyncio.Semaphore(WINDOW)

        async def one(body: bytes) -> None:
            try:
                await channel.basic_publish(body, routing_key="bench.raw")
            finally:
                slots.release()

        await channel.confirm_delivery()
        tasks = []
        async for body in _data(size):
            await slots.acquire()
            tasks.append(asyncio.ensure_future(one(body)))
        await asyncio.gather(*tasks)
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
    ended = time.perf_counter()
    await connection.close()
    return {"started": started, "ended": ended}


def _run(role: str, url: str, size: int, chunk: int, ref: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "AGENTBUS_ARTIFACT_CHUNK_SIZE": str(chunk)}
    argv = [sys.executable, __file__, "--role", role, "--url", url, "--size", str(size)]
    done = subprocess.run(
        [*argv, *(["--ref", ref] if ref else [])], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{role} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _broker_cost(broker: Any) -> tuple[int, int]:
    """The node's memory (bytes) and its streams' files on disk (bytes)."""
    status = json.loads(broker.rabbitmqctl("status", "--formatter", "json"))
    streams = Path(broker.directory) / "mnesia"
    on_disk = sum(p.stat().st_size for p in streams.rglob("*.segment"))
    return int(status["memory"]["total"]["rss"]), on_disk


def _transfer(broker: Any, size: int, chunk: int) -> dict[str, Any]:
    url = broker.url
    memory0, disk0 = _broker_cost(broker)
    wrote = _run("write", url, size, chunk)
    memory1, disk1 = _broker_cost(broker)
    read = _run("read", url, size, chunk, wrote["ref"])
    ref = json.loads(wrote["ref"])
    assert read["sha256"] == ref["sha256"], "the digests differ"
    raw_w = _run("raw-write", url, size, chunk)
    raw_r = _run("raw-read", url, size, chunk)
    return {
        "size_mib": size / MiB,
        "chunk_kib": chunk // 1024,
        "put_mib_s": size / MiB / wrote["seconds"],
        "read_mib_s": size / MiB / read["seconds"],
        "raw_publish_mib_s": size / MiB / raw_w["seconds"],
        "raw_consume_mib_s": size / MiB / raw_r["seconds"],
        "writer_peak_growth_mib": (wrote["peak_kib"] - wrote["rss_kib"]) / 1024,
        "reader_peak_growth_mib": (read["peak_kib"] - read["rss_kib"]) / 1024,
        "broker_memory_growth_mib": (memory1 - memory0) / MiB,
        "broker_disk_per_byte": (disk1 - disk0) / size,
    }


def _print(row: dict[str, Any]) -> None:
    print(
        f"{row['size_mib']:7.0f} MiB chunk {row['chunk_kib']:5d} KiB | "
        f"put {row['put_mib_s']:6.1f} MiB/s ({row['put_mib_s'] / row['raw_publish_mib_s']:.2f}"
        f" of raw {row['raw_publish_mib_s']:.1f}) | read {row['read_mib_s']:6.1f} MiB/s "
        f"({row['read_mib_s'] / row['raw_consume_mib_s']:.2f} of raw "
        f"{row['raw_consume_mib_s']:.1f}) | peak RSS +{row['writer_peak_growth_mib']:.1f} / "
        f"+{row['reader_peak_growth_mib']:.1f} MiB | broker +{row['broker_memory_growth_mib']:.0f}"
        f" MiB memory, {row['broker_disk_per_byte']:.3f} disk bytes a byte",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1024], help="MiB")
    parser.add_argument("--chunks", type=int, nargs="+", default=[1024], help="KiB")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ref", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(asyncio.run(_role(args.role, args.url, args.size, args.ref))))
        return
    from agentbus.testing.chaos import PrivateBroker

    rows = []
    for chunk in args.chunks:
        for size in args.sizes:
            with PrivateBroker("agentbus-bench-artifacts") as broker:  # a fresh node each
                rows.append(_transfer(broker, size * MiB, chunk * 1024))
                _print(rows[-1])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
