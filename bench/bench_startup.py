"""What starting costs: ``import agentbus``, and an agent process until it is ready.

.venv/bin/python bench/bench_startup.py [--runs 5] [--url URL] [--json FILE]

Ready means connected, its queues declared and its first heartbeat sent: the moment it
logs "agent started". Each figure is the median (and best) of the runs, each in a fresh
process; the import's heaviest modules are listed from ``python -X importtime``, and the
import of agentbus's third-party dependencies alone is timed beside it (what it must cost).
suite.py runs this as its ``startup`` section (``run_startup``).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _harness import delete_all, parser, write_json
from agentbus.bus import Topology

AGENTBUS = str(Path(sys.executable).with_name("agentbus"))
READY_TARGET = 0.5  # seconds (issue 17)
# The third-party top-level packages ``import agentbus`` loads (stdlib and private left out).
DEPENDENCIES = """
import sys
import agentbus
stdlib = sys.stdlib_module_names
tops = {name for name in sys.modules if "." not in name and name != "agentbus"}
files = {t: getattr(sys.modules[t], "__file__", None) or "" for t in tops}
print(" ".join(sorted(t for t in tops if "site-packages" in files[t] and t[0] != "_")))
"""


def import_seconds() -> tuple[float, list[tuple[int, str]]]:
    """Wall time of ``python -c 'import agentbus'`` and the heaviest modules (µs, name)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import agentbus"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    modules = []
    for line in done.stderr.splitlines()[1:]:
        _, cumulative, name = line.split("|")
        if name.startswith("  ") and not name.startswith("    "):  # agentbus's direct imports
            modules.append((int(cumulative), name.strip()))
    return elapsed, sorted(modules, reverse=True)[:5]


def dependencies() -> list[str]:
    """The third-party packages ``import agentbus`` imports."""
    done = subprocess.run(
        [sys.executable, "-c", DEPENDENCIES], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def seconds_to_import(modules: list[str]) -> float:
    """Wall time of a fresh interpreter importing ``modules``."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], check=True)
    return time.perf_counter() - start


def ready_seconds(url: str, exchange: str, agent_id: str) -> float:
    """Seconds from spawning ``agentbus run`` to its "agent started" line."""
    env = {**os.environ, "AGENTBUS_URL": url, "AGENTBUS_EXCHANGE": exchange}
    env["AGENTBUS_LOG_FORMAT"] = "json"
    root = Path(__file__).resolve().parents[1]
    start = time.perf_counter()
    process = subprocess.Popen(
        [AGENTBUS, "run", "examples.greeter:Greeter", "--id", agent_id],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True, cwd=root,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if '"agent started"' in line:
                return time.perf_counter() - start
        raise RuntimeError(f"the agent exited with {process.wait()} before it was ready")
    finally:
        process.terminate()
        process.wait()


def run_startup(url: str, runs: int) -> dict[str, Any]:
    """``runs`` fresh imports of agentbus and of its dependencies alone, ``runs`` agents
    started to ready on a throwaway exchange (deleted after)."""
    imports = [import_seconds() for _ in range(runs)]
    deps = dependencies()
    deps_import = [seconds_to_import(deps) for _ in range(runs)]
    exchange = f"bench-startup-{uuid.uuid4().hex[:8]}"
    ids = [f"greeter-{n}" for n in range(runs)]
    try:
        readies = [ready_seconds(url, exchange, agent_id) for agent_id in ids]
    finally:
        topology = Topology(exchange)
        queues = [topology.service_queue("greeter"), topology.dead_letter_queue]
        queues += [topology.instance_queue(agent_id) for agent_id in ids]
        asyncio.run(delete_all(url, queues, [exchange, topology.dead_letter_exchange]))
    return {
        "import_s": [seconds for seconds, _ in imports],
        "deps": deps,
        "deps_import_s": deps_import,
        "heaviest": imports[-1][1],
        "ready_s": readies,
    }


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--runs", type=int, default=5)
    options = args.parse_args()
    figures = run_startup(options.url, options.runs)
    wall, deps = figures["import_s"], figures["deps_import_s"]
    median, best = statistics.median(wall) * 1000, min(wall) * 1000
    print(f"import agentbus (a fresh interpreter): {median:.0f} ms median, {best:.0f} best")
    for micros, name in figures["heaviest"]:
        print(f"  {name:<32} {micros / 1000:6.1f} ms")
    print(
        f"its dependencies alone ({', '.join(figures['deps'])}): "
        f"{statistics.median(deps) * 1000:.0f} ms median, {min(deps) * 1000:.0f} best"
    )
    readies = figures["ready_s"]
    ready = statistics.median(readies)
    verdict = "PASS" if ready <= READY_TARGET else "MISS"
    print(
        f"agent ready: {ready:.3f} s median, {min(readies):.3f} best "
        f"(target <= {READY_TARGET} s: {verdict})"
    )
    write_json(options.json, figures | {"verdict": verdict})


if __name__ == "__main__":
    main()
