"""Run the benchmarks in one go: agentbus vs raw aio-pika vs FastStream, on one broker.

.venv/bin/python bench/suite.py [--quick] [--out bench/results] [--only rr,fanout,...]
    [--sides agentbus,aio-pika] [--before SRC]: docs/benchmarks.md, "Reproduce them".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from datetime import datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

import aio_pika

try:
    import faststream  # noqa: F401 -- a peer measured against: say how to get it
except ImportError:
    sys.exit("bench/suite.py needs FastStream: .venv/bin/pip install -e '.[bench]'")

import _harness as harness
import _suite_costs as costs
import _suite_features as features
from _suite_faces import run_gateway, run_mcp, run_mcp_workers
from _suite_fanout import run_fanout
from _suite_report import markdown, targets
from _suite_rr import SIDES, run_rr
from bench_registry import run_registry
from envelope_paths import run_codec, run_seams

SECTIONS = {  # --only's names, in the order they run
    "codec": run_codec, "rr": run_rr, "fanout": run_fanout, "registry": run_registry,
    "startup": costs.run_startup, "audit": partial(costs.bus_variants, field="audit",
                                                   values={"off": False, "on": True}),
    "queue-type": partial(costs.bus_variants, field="queue_type",
                          values={"classic": "classic", "quorum": "quorum"}),
    "presence": costs.run_presence, "durable": costs.run_durable, "gateway": run_gateway,
    "seams": run_seams, "mcp": run_mcp, "mcp-workers": run_mcp_workers, "dedup": costs.run_dedup,
    "questions": features.run_questions, "maps": features.run_maps,
    "artifacts": features.run_artifacts, "schedules": features.run_schedules,
}  # fmt: skip
DEFAULT = ("rr", "fanout", "registry", "codec", "startup")
KEYS = {"rr": "request_response"}  # results keys, where not the name with _ for -
DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
PACKAGES = ("agentbus", "aio-pika", "faststream", "pydantic", "orjson")
BUS = Config(requests=1500, seconds=4.0, window=128, rounds=2)  # audit, queue-type, presence
QUICK_BUS = Config(requests=300, seconds=2.0, window=128, rounds=2)
FACES = Config(count=300, workers=16, seconds=4.0)  # gateway, mcp, mcp-workers
QUICK_FACES = Config(count=100, workers=16, seconds=2.0)
# registry cases: (agents, heartbeat interval s, sender processes, s to join[, registries])
FULL = {
    "rr": Config(requests=400, rounds=6, load_rounds=3, seconds=5.0, procs=(1, 4), window=64),
    "fanout": Config(sizes=[10, 100, 1000, 10_000], rounds=2, workers=3, concurrency=64),
    "registry": Config(cases=[(1000, 1.0, 0, 0.0), (50_000, 5.0, 3, 60.0),
                              (50_000, 5.0, 3, 0.0), (50_000, 5.0, 3, 60.0, 2)], duration=15.0),
    "codec": Config(budget=50_000_000), "startup": Config(runs=5),
    "audit": BUS, "queue-type": BUS, "presence": Config(**vars(BUS) | {"rounds": 4}),
    "durable": Config(subtasks=2000, rounds=3), "seams": Config(messages=20_000),
    "gateway": FACES, "mcp": FACES, "mcp-workers": FACES, "dedup": BUS,
    "questions": Config(rounds=400, questions=10_000), "maps": Config(items=10_000, rounds=2),
    "artifacts": Config(sizes=[1, 100, 1024], chunks=[1024]), "schedules": Config(minutes=10.0),
}  # fmt: skip
QUICK = FULL | {
    "rr": Config(requests=150, rounds=4, load_rounds=2, seconds=2.0, procs=(1, 4), window=64),
    "fanout": Config(sizes=[10, 100, 1000], rounds=2, workers=3, concurrency=64),
    "registry": Config(cases=[(100, 1.0, 0, 0.0), (5000, 5.0, 0, 0.0), (5000, 5.0, 0, 0.0, 2)],
                       duration=4.0),
    "codec": Config(budget=5_000_000), "startup": Config(runs=3),
    "audit": QUICK_BUS, "queue-type": QUICK_BUS, "presence": QUICK_BUS,
    "durable": Config(subtasks=300, rounds=2), "seams": Config(messages=5000),
    "gateway": QUICK_FACES, "mcp": QUICK_FACES, "mcp-workers": QUICK_FACES, "dedup": QUICK_BUS,
    "questions": Config(rounds=100, questions=2000), "maps": Config(items=2000, rounds=1),
    "artifacts": Config(sizes=[1, 100], chunks=[1024]), "schedules": Config(minutes=1.0),
}  # fmt: skip


def meta(url: str) -> dict[str, Any]:
    async def broker() -> str:
        async with await aio_pika.connect(url) as connection:
            server = connection.transport.connection if connection.transport else None
            return str(server.server_properties.get("version", "?") if server else "?")

    packages = [f"{package} {version(package)}" for package in PACKAGES]  # all installed
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "broker": asyncio.run(broker()),
            "packages": packages, "load_average": load}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--only", default=",".join(DEFAULT), help=f"of {', '.join(SECTIONS)}")
    parser.add_argument("--sides", default=",".join(SIDES), help="request/response sides")
    parser.add_argument("--before", metavar="SRC", help="gateway, mcp-workers: agentbus from SRC")
    args = parser.parse_args()
    sides = tuple(s.strip() for s in args.sides.split(",") if s.strip())
    if not sides or set(sides) - set(SIDES):
        parser.error(f"--sides: some of {', '.join(SIDES)}")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    harness.quiet_logging()
    harness.raise_on_sigterm()  # clean up as on Ctrl-C
    mode = "quick" if args.quick else "full"
    configs = QUICK if args.quick else FULL
    configs["rr"].sides = sides
    for face in ("gateway", "mcp-workers"):  # a copy each: the faces share their sizes
        configs[face] = Config(**vars(configs[face]) | {"before": args.before})
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f} s] {text}", file=sys.stderr, flush=True)

    started = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
    results: dict[str, Any] = {"mode": mode, "started": started, "meta": meta(args.url)}
    try:
        for name, run in SECTIONS.items():
            if name in only:
                say(name)
                results[KEYS.get(name, name.replace("-", "_"))] = run(args.url, configs[name], say)
    except KeyboardInterrupt:
        print("interrupted: processes stopped, queues and exchanges deleted", file=sys.stderr)
        return 130
    results["seconds"] = round(time.monotonic() - t0, 1)
    results["targets"] = targets(results)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"suite-{mode}-{started.replace(':', '').replace(' ', '-')}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    stem.with_suffix(".md").write_text(text := markdown(results))
    print(text)
    say(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
