"""Run every benchmark in one go: agentbus vs raw aio-pika vs FastStream, on one broker.

.venv/bin/python bench/suite.py [--quick] [--out bench/results] [--only rr,fanout,...]
    [--sides agentbus,aio-pika]

Sections: request/response latency and throughput (rr), fan-out and fan-in of N subtasks
through the leader with its memory (fanout), the registry under simulated agents (registry:
50,000 beating every 5 s in the full run), the envelope codec (codec) and what starting
costs (startup: import agentbus, an agent until ready). The report leads with issue 17's
targets, each with its verdict. ``--sides`` limits request/response to some of its sides
(agentbus, agent, agent-transient, aio-pika, raw-min, faststream, faststream-rq): ``--only
rr --sides agent,aio-pika`` is the quick agent-against-raw check, latency and CPU per
request. ``--quick`` runs smaller sizes: its targets rows say the size the target is for.
Writes suite-<time>.json, .md and, with matplotlib installed (``pip install -e
'.[bench]'``), .png to --out; prints the Markdown.
Every process, queue and exchange a section starts is removed when it ends, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aio_pika

try:
    import faststream  # noqa: F401 -- a peer measured against: say how to get it
except ImportError:
    sys.exit("bench/suite.py needs FastStream: .venv/bin/pip install -e '.[bench]'")

from _harness import broker_version, quiet_logging, raise_on_sigterm, write_json
from _harness import parser as cli
from _suite_codec import run_codec
from _suite_fanout import run_fanout
from _suite_report import chart, markdown, targets
from _suite_rr import SIDES as RR_SIDES
from _suite_rr import run_rr
from bench_registry import run_registry
from bench_startup import run_startup

SECTIONS = ("rr", "fanout", "registry", "codec", "startup")
PACKAGES = ("agentbus", "aio-pika", "faststream", "pydantic", "orjson", "matplotlib")

FULL = SimpleNamespace(
    rr=SimpleNamespace(requests=400, rounds=6, load_rounds=3, seconds=5.0, procs=(1, 4), window=64),
    fanout=SimpleNamespace(sizes=[10, 100, 1000, 10_000], rounds=2, workers=3, concurrency=64),
    # (agents, heartbeat interval s, sender processes, s over which they join): 50,000 every
    # 5 s is issue 17's target, held once joined and joining all at once (a registry restart)
    registry=SimpleNamespace(
        cases=[(1000, 1.0, 0, 0.0), (50_000, 5.0, 3, 60.0), (50_000, 5.0, 3, 0.0)],
        duration=15.0,
    ),
    startup=SimpleNamespace(runs=5),
)
QUICK = SimpleNamespace(
    rr=SimpleNamespace(requests=150, rounds=4, load_rounds=2, seconds=2.0, procs=(1, 4), window=64),
    fanout=SimpleNamespace(sizes=[10, 100, 1000], rounds=2, workers=3, concurrency=64),
    registry=SimpleNamespace(cases=[(100, 1.0, 0, 0.0), (5000, 5.0, 0, 0.0)], duration=4.0),
    startup=SimpleNamespace(runs=3),
)


def package_versions() -> list[str]:
    found = []
    for package in PACKAGES:
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return found


async def broker_of(url: str) -> str:
    async with await aio_pika.connect(url) as connection:
        return broker_version(connection)


def meta(url: str) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "broker": asyncio.run(broker_of(url)),
        "packages": package_versions(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def write(results: dict[str, Any], out: Path) -> tuple[Path, Path, Path | None]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"suite-{results['mode']}-{results['started'].replace(':', '').replace(' ', '-')}"
    data, report = out / f"{stem}.json", out / f"{stem}.md"
    write_json(data, results)
    image = chart(results, out / f"{stem}.png")
    text = markdown(results)
    if image is not None:
        text += f"\n![fan-out latency, throughput and memory against N]({image.name})\n"
    report.write_text(text)
    return data, report, image


def main() -> int:
    parser = cli(__doc__, json_out=False)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    parser.add_argument("--sides", default=",".join(RR_SIDES), help="request/response sides")
    args = parser.parse_args()
    sides = tuple(s.strip() for s in args.sides.split(",") if s.strip())
    if not sides or set(sides) - set(RR_SIDES):
        parser.error(f"--sides: some of {', '.join(RR_SIDES)}")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    quiet_logging()
    raise_on_sigterm()  # clean up as on Ctrl-C
    cfg = QUICK if args.quick else FULL
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f} s] {text}", file=sys.stderr, flush=True)

    started = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "started": started}
    results["meta"] = meta(args.url)
    try:
        if "codec" in only:
            say("codec")
            results["codec"] = run_codec(args.quick)
        if "rr" in only:
            rr = SimpleNamespace(**vars(cfg.rr), sides=sides)
            results["request_response"] = run_rr(args.url, rr, say)
        if "fanout" in only:
            results["fanout"] = run_fanout(args.url, cfg.fanout, say)
        if "registry" in only:
            results["registry"] = run_registry(args.url, cfg.registry, say)
        if "startup" in only:
            say("startup")
            results["startup"] = run_startup(args.url, cfg.startup.runs)
    except KeyboardInterrupt:
        print("interrupted: processes stopped, queues and exchanges deleted", file=sys.stderr)
        return 130
    results["seconds"] = round(time.monotonic() - t0, 1)
    results["targets"] = targets(results)
    data, report, image = write(results, args.out)
    print(report.read_text())
    say(f"wrote {data}, {report}" + (f", {image}" if image else " (no matplotlib: no chart)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
