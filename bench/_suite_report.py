"""suite.py's verdicts, Markdown report and chart (matplotlib optional: no chart without it).

Issue 17's targets lead: each a ratio (or a figure) taken in this one run, as the median
and the best of the rounds. The verdict is the median's; "MISS (best PASS)" when only the
best round meets the goal. Earlier goals that still guard something follow.
"""

from __future__ import annotations

import itertools
import operator
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _harness as harness

# issue 27 (issue 17's, tightened)
AGENT_P50_VS_RAW = 1.10  # agent / aio-pika, both persistent and confirmed
TRANSIENT_P50_VS_MIN = 1.15  # agent-transient / raw-min
THROUGHPUT_VS_RAW = 0.95  # agent / aio-pika, 1 and 4 client processes
SERVER_CPU_VS_RAW = 1.10  # agent / aio-pika, server CPU per request under 4 clients
FANOUT_VS_RAW = 0.95
# issue 27: what agentbus[fast] gives: agent on uvloop against raw aio-pika on asyncio's loop
UVLOOP_P50_VS_RAW = 1.0  # below: faster
UVLOOP_THROUGHPUT_VS_RAW = 1.0  # above: faster
FANOUT_VS_FASTSTREAM = 2.0  # FastStream's own broker.request
RSS_PER_SUBTASK = 1500  # bytes: leader RSS growth over the plan, per subtask
REGISTRY_AGENTS, REGISTRY_INTERVAL = 50_000, 5.0
REGISTRY_CPU = 1.0  # cores
READY_SECONDS = 0.5
# earlier goals, still guards: the bus layer near raw, FastStream well behind, memory linear
BUS_P50_VS_RAW = 1.3
BUS_P50_VS_FASTSTREAM = 0.6
MEMORY_LINEAR = 1.5  # the slope at the top may grow at most this much over the one below
ECHO = ("(`Bus.serve` echo; {rounds} rounds of {requests:,} sequential requests, then "
        "{seconds:g} s with {window} in flight; medians)")  # fmt: skip
STUDIES = {  # the cost sections, by results key: their title
    "audit": f"Audit stream off and on {ECHO}", "queue_type": f"Classic or quorum queues {ECHO}",
    "presence": f"The presence check {ECHO}, and a request to a stopped service",
    "durable": "Durable plans: the leader's journal ({subtasks:,} echo subtasks, {rounds} "
    "rounds, registry, leader and two workers in one process; medians)",
    "gateway": "The A2A gateway against the a2a-sdk's server alone and a direct bus request, "
    "1, 2 and 4 processes ({count} sequential calls a path; throughput: {workers} concurrent "
    "callers for {seconds:g} s; CPU µs a call costs each process meanwhile; {cpus} cores)",
    "mcp": "MCP tool calls against a direct bus request ({count} sequential calls a path, "
    "the SDK's client, both protocol eras; throughput: {workers} concurrent callers for "
    "{seconds:g} s)",
    "mcp_workers": "agentbus mcp over HTTP with 1, 2 and 4 processes against the MCP SDK's "
    "server alone ({era}; {count} sequential calls a path; throughput: {workers} concurrent "
    "callers for {seconds:g} s; {cpus} cores)",
    "seams": "Seams: each fast path against the library's public way (µs per call)",
    "dedup": f"The in-process de-duplication window or the Redis store {ECHO}; the store "
    "alone: check-in and completion of a request, sequential, then 64 at once",
}  # fmt: skip
COLORS = {"agentbus": "tab:blue", "aio-pika": "tab:green", "faststream": "tab:red",
          "faststream-rq": "tab:orange"}  # fmt: skip
UNITS = {"x": "{:.2f}", "B": "{:,.0f} B", "s": "{:.3f} s", "ms": "{:,.0f} ms",
         "core": "{:.2f} core", "beats/s": "{:,.0f} beats/s"}  # fmt: skip
AT_MOST, AT_LEAST = operator.le, operator.ge
Compare = Callable[[float, float], bool]


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _target(name: str, median: float | None, best: float | None,
            goal: tuple[Compare, float] | None, detail: str, *, unit: str = "x",
            ok: bool | None = None, goal_text: str | None = None,
            earlier: bool = False) -> dict[str, Any]:  # fmt: skip
    """One row. ``goal`` (compare, bound) judges the median and the best; ``ok`` overrides
    the median's verdict (a figure with more than one condition); no goal: measured only."""
    text = goal_text or ""
    passed = best_passed = ok
    if goal is not None:
        compare, bound = goal
        text = text or f"{'<=' if compare is AT_MOST else '>='} {_unit(bound, unit)}"
        if median is not None and ok is None:
            passed = compare(median, bound)
        best_passed = best is not None and compare(best, bound)
        if ok is not None:
            best_passed = ok and best_passed
    verdict = "measured" if passed is None else "PASS" if passed else "MISS"
    if passed is False and best_passed:
        verdict = "MISS (best PASS)"
    return {"target": name, "median": median, "best": best, "unit": unit, "goal": text,
            "pass": passed, "verdict": verdict, "detail": detail,
            "issue": None if earlier else 17}  # fmt: skip


def _unit(value: float | None, unit: str) -> str:
    return "-" if value is None else UNITS[unit].format(value)


def _ratio(stats: dict[str, dict[str, float]], side: str, peer: str) -> tuple[float, float] | None:
    """(median ratio, best ratio) of two sides' best/median figures; None if one is missing."""
    if side not in stats or peer not in stats:  # suite.py --sides left one out
        return None
    a, b = stats[side], stats[peer]
    return a["median"] / b["median"], a["best"] / b["best"]


def _bm_pair(stats: dict[str, dict[str, float]], side: str, peer: str, unit: str) -> str:
    a, b = stats[side], stats[peer]
    return (f"{side} {_n(a['median'])} vs {peer} {_n(b['median'])} {unit} median, "
            f"{_n(a['best'])} vs {_n(b['best'])} best")  # fmt: skip


def rr_targets(rr: dict[str, Any]) -> list[dict[str, Any]]:
    s = rr["summary"]
    out = []
    p50 = {side: s[side]["p50_us"] for side in s}
    for side, peer, goal, what in (
        ("agent", "aio-pika", AGENT_P50_VS_RAW, "persistent, confirmed, durable queues"),
        ("agent-transient", "raw-min", TRANSIENT_P50_VS_MIN, "transient, no confirms"),
    ):
        if r := _ratio(p50, side, peer):
            detail = f"{what}: " + _bm_pair(p50, side, peer, "µs")
            name = f"request/response p50, {side} / {peer}"
            out.append(_target(name, *r, (AT_MOST, goal), detail))
    procs = sorted(int(key.removeprefix("per_s_x")) for key in s.get("agent", {}) if
                   key.startswith("per_s_x"))  # fmt: skip
    for k in procs:
        rate = {side: s[side][f"per_s_x{k}"] for side in s}
        if r := _ratio(rate, "agent", "aio-pika"):
            detail = "durability-matched raw (persistent, confirmed): "
            detail += _bm_pair(rate, "agent", "aio-pika", "req/s")
            if t := _ratio(rate, "agent-transient", "raw-min"):
                detail += f"; transient, agent-transient / raw-min: {t[0]:.2f} median, "
                detail += f"{t[1]:.2f} best"
            name = f"throughput, {k} client process{'es' if k > 1 else ''}, agent / aio-pika"
            out.append(_target(name, *r, (AT_LEAST, THROUGHPUT_VS_RAW), detail))
    out += uvloop_targets(s, procs)
    if procs:
        top = procs[-1]
        cpu = {side: s[side][f"server_cpu_us_x{top}"] for side in s}
        sequential = {side: s[side]["server_cpu_us"] for side in s}
        if r := _ratio(cpu, "agent", "aio-pika"):
            detail = f"under {top} client processes: " + _bm_pair(cpu, "agent", "aio-pika", "µs")
            if q := _ratio(sequential, "agent", "aio-pika"):
                detail += f"; sequential requests: {q[0]:.2f} median, {q[1]:.2f} best"
            name = "server CPU per request, agent / aio-pika"
            out.append(_target(name, *r, (AT_MOST, SERVER_CPU_VS_RAW), detail))
    return out


def uvloop_targets(s: dict[str, Any], procs: list[int]) -> list[dict[str, Any]]:
    """agentbus[fast]'s gain: the agent on uvloop against raw aio-pika on asyncio's own loop."""
    out = []
    what = "agent-uvloop (server and clients on uvloop) vs aio-pika on asyncio's loop"
    p50 = {side: s[side]["p50_us"] for side in s}
    if r := _ratio(p50, "agent-uvloop", "aio-pika"):
        detail = f"{what}: " + _bm_pair(p50, "agent-uvloop", "aio-pika", "µs")
        if same := _ratio(p50, "agent-uvloop", "agent"):
            detail += f"; agent-uvloop / agent (asyncio): {same[0]:.2f} median"
        out.append(_target("uvloop: request/response p50, agent-uvloop / aio-pika", *r,
                           (AT_MOST, UVLOOP_P50_VS_RAW), detail))  # fmt: skip
    for k in procs:
        rate = {side: s[side][f"per_s_x{k}"] for side in s}
        if r := _ratio(rate, "agent-uvloop", "aio-pika"):
            detail = f"{what}: " + _bm_pair(rate, "agent-uvloop", "aio-pika", "req/s")
            name = f"uvloop: throughput, {k} client process{'es' if k > 1 else ''}, "
            out.append(_target(name + "agent-uvloop / aio-pika", *r,
                               (AT_LEAST, UVLOOP_THROUGHPUT_VS_RAW), detail))  # fmt: skip
    return out


def fanout_targets(fan: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    top = max(fan["params"]["sizes"])
    suffix = " (target is for N=10,000)" if top != 10_000 else ""
    per_s = {side: fan["summary"][side][str(top)]["per_s"] for side in fan["summary"]}
    for peer, goal, what in (
        (
            "aio-pika",
            FANOUT_VS_RAW,
            "the leader without its journal (--no-durable) against a "
            "raw aio-pika leader in-process",
        ),
        ("faststream", FANOUT_VS_FASTSTREAM, "FastStream's own broker.request"),
    ):
        if r := _ratio(per_s, "agentbus", peer):
            detail = f"N={top:,}, {what}: " + _bm_pair(per_s, "agentbus", peer, "subtasks/s")
            name = f"fan-out N={top:,}, leader / {peer}{suffix}"
            out.append(_target(name, *r, (AT_LEAST, goal), detail))
    growth = [run["rss_peak_delta"] / top for run in fan["timed"]["agentbus"][str(top)]]
    traced = fan["memory"]["agentbus"][str(top)]["peak_bytes"] / top
    detail = (
        f"N={top:,}: the `agentbus leader` process's VmHWM over its RSS before the plan, per "
        f"subtask; rounds {', '.join(_n(g) for g in growth)} B; tracemalloc peak of Plan + "
        f"PlanRunner {_n(traced)} B/subtask"
    )
    name = f"leader RSS growth per subtask{suffix}"
    out.append(
        _target(name, statistics.median(growth), min(growth), (AT_MOST, RSS_PER_SUBTASK),
                detail, unit="B", goal_text=f"< {RSS_PER_SUBTASK:,} B")
    )  # fmt: skip
    return out


def registry_targets(registry: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the cases at the highest beat rate: held once joined, and joining at once."""
    top = max(f["agents"] / f["interval_s"] for f in registry)
    out = []
    for case in (f for f in registry if f["agents"] / f["interval_s"] == top):
        out += registry_rows(case)
    return out


def registry_rows(case: dict[str, Any]) -> list[dict[str, Any]]:
    agents, interval = case["agents"], case["interval_s"]
    suffix = ""
    if (agents, interval) != (REGISTRY_AGENTS, REGISTRY_INTERVAL):
        suffix = f" (target is for {REGISTRY_AGENTS:,} every {REGISTRY_INTERVAL:g} s)"
    ramp = case.get("ramp_s") or 0.0
    suffix = (f", joining over {ramp:g} s" if ramp else ", all joining at once") + suffix
    registries = case.get("registries", 1)
    if registries > 1:
        suffix = f", {registries} registries sharing" + suffix
    offered, sent = case["beats_offered_per_s"], case["beats_achieved_per_s"]
    processed = case["beats_processed_per_s"]
    short = "" if sent >= 0.95 * offered else " (the simulator fell short of the offer)"
    holds = processed >= 0.95 * offered
    known = "-" if case["known_agents"] is None else f"{case['known_agents']:,}"
    detail = (
        f"{_n(sent)} of {_n(offered)} beats/s sent{short} from {case['senders'] or 1} "
        f"process(es), {_n(processed)} processed; backlog {case['registry_backlog']}, queue lag "
        f"max {case['queue_lag_max_s'] * 1000:,.0f} ms, beat lag max "
        f"{(case['beat_lag_max_s'] or 0) * 1000:,.0f} ms, known {known} of {agents:,}"
    )
    name = f"registry holds {agents:,} agents beating every {interval:g} s{suffix}"
    out = [
        _target(name, processed, None, None, detail, unit="beats/s", ok=case["keeps_up_pass"],
                goal_text=f"{_n(offered)} beats/s, no backlog or lag, all known")
    ]  # fmt: skip
    cores = case["registry_cpu_cores"] / registries
    host = f"host busy {case['host_busy_cores']:.2f} of {case['host_cores']} cores"
    if case.get("broker_cpu_cores") is not None:
        host += f" (broker {case['broker_cpu_cores']:.2f}, simulator "
        host += f"{case['generator_cpu_cores']:.2f})"
    if holds:
        detail = f"{_n(case['cpu_per_heartbeat_us'])} µs of registry CPU per beat; {host}"
        if registries > 1:
            detail += f"; {case['registry_cpu_cores']:.2f} cores in all"
    else:  # the CPU of a registry that does not keep up says nothing about the target
        detail = f"not holding the rate ({_n(processed)} of {_n(offered)} beats/s processed); "
        detail += host
    if case.get("registry_rss"):
        detail += f"; registry RSS {case['registry_rss'] / 1e6:,.0f} MB"
    out.append(
        _target(f"registry CPU holding that rate{suffix}" + (" (each)" if registries > 1 else ""),
                cores, None, (AT_MOST, REGISTRY_CPU),
                detail, unit="core", goal_text=f"< {REGISTRY_CPU:g} core",
                ok=holds and cores < REGISTRY_CPU)
    )  # fmt: skip
    false = case["false_offline"]
    detail = (
        f"{case['detected']} of {case['killed']} silenced agents reported, p50 "
        f"{_seconds(case['detect_p50_s'])}; false offlines {len(false)}; bound "
        f"{case['detect_target_s']:.1f} s = 3 intervals + sweep slack"
    )
    if case.get("beats_lost") is not None:  # the registry's own word on its load
        overloaded = "said it was overloaded" if case.get("overloaded") else "not overloaded"
        detail += f"; {case['beats_lost']:,} beats known lost, {overloaded}"
    out.append(
        _target(f"registry offline detection, no false offlines{suffix}",
                case["detect_max_s"], None, None, detail, unit="s",
                ok=case["detect_target_pass"],
                goal_text=f"<= {case['detect_target_s']:.1f} s, 0 false")
    )  # fmt: skip
    return out


def startup_targets(startup: dict[str, Any]) -> list[dict[str, Any]]:
    ready, median = startup["ready_s"], statistics.median
    ms = [s * 1000 for s in startup["import_s"]]
    deps = [s * 1000 for s in startup["deps_import_s"]]
    heaviest = ", ".join(f"{name} {us / 1000:.0f}" for us, name in startup["heaviest"][:3])
    return [
        _target("agent ready after start", median(ready), min(ready), (AT_MOST, READY_SECONDS),
                '`agentbus run examples.greeter:Greeter` to its "agent started" log line '
                f"(connected, declared, first heartbeat), {len(ready)} fresh processes", unit="s"),
        _target("import agentbus", median(ms), min(ms), None,
                f"`python -c 'import agentbus'` in a fresh interpreter; the "
                f"{len(startup['deps'])} third-party packages it loads, alone: "
                f"{median(deps):.0f} ms median, so agentbus's own share "
                f"~{median(ms) - median(deps):.0f} ms; heaviest of its imports (ms, -X "
                f"importtime, dependencies included): {heaviest}", unit="ms",
                goal_text="what it must (measured)"),
    ]  # fmt: skip


def earlier_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    if rr := results.get("request_response"):
        p50 = {side: rr["summary"][side]["p50_us"] for side in rr["summary"]}
        for peer, goal in (("aio-pika", BUS_P50_VS_RAW), ("faststream", BUS_P50_VS_FASTSTREAM)):
            if r := _ratio(p50, "agentbus", peer):
                detail = "Bus.request against Bus.serve: " + _bm_pair(p50, "agentbus", peer, "µs")
                name = f"request/response p50, bus layer agentbus / {peer}"
                out.append(_target(name, *r, (AT_MOST, goal), detail, earlier=True))
    if fan := results.get("fanout"):
        peak = {int(n): case["peak_bytes"] for n, case in fan["memory"]["agentbus"].items()}
        steps = [(a, b, (peak[b] - peak[a]) / (b - a)) for a, b in itertools.pairwise(sorted(peak))]
        if len(steps) > 1:
            (low, high, slope), below = steps[-1], steps[-2][2]
            growth = slope / below if below > 0 else float("inf")
            detail = f"tracemalloc {_n(slope)} B/subtask for N={low:,} to {high:,} vs "
            detail += f"{_n(below)} B/subtask for N={steps[-2][0]:,} to {steps[-2][1]:,}"
            out.append(
                _target("leader memory linear in N: slope ratio", growth, None,
                        (AT_MOST, MEMORY_LINEAR), detail, earlier=True)
            )  # fmt: skip
    return out


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 17's targets for the sections that ran, then the earlier goals still kept."""
    out = []
    for key, rows in (("request_response", rr_targets), ("fanout", fanout_targets),
                      ("registry", registry_targets), ("startup", startup_targets)):  # fmt: skip
        if section := results.get(key):
            out += rows(section)
    return out + earlier_targets(results)


def _size(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1e6 else f"{n / 1e3:g} KB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _joining(case: dict[str, Any]) -> str:
    return f", joining over {ramp:g} s" if (ramp := case.get("ramp_s") or 0.0) else ""


def _bm(stats: dict[str, float], scale: float = 1.0) -> str:
    return f"{_n(stats['best'] * scale)} / {_n(stats['median'] * scale)}"


def table(head: str, rows: Any) -> list[str]:
    """A Markdown table: ``head`` names the columns, ``|``-separated, ``>`` ending those
    aligned right; ``rows`` gives the cells."""
    names = head.split("|")
    lines = ["| " + " | ".join(name.removesuffix(">") for name in names) + " |"]
    lines.append("|" + "|".join("---:" if name.endswith(">") else "---" for name in names) + "|")
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def targets_table(rows: list[dict[str, Any]]) -> list[str]:
    return table("target|median>|best>|goal|verdict|detail", (
        (t["target"], _unit(t["median"], t["unit"]), _unit(t["best"], t["unit"]), t["goal"],
         t["verdict"], t["detail"]) for t in rows))  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    m, targets = results["meta"], results["targets"]
    lines = [
        f"# agentbus benchmark suite ({results['mode']}), {results['started']}",
        "",
        f"Host: {m['cpus']} CPUs, {m['platform']}, load average {m['load_average']} at start; "
        f"Python {m['python']}; RabbitMQ {m['broker']}; " + ", ".join(m["packages"]) + ".",
        "Every comparison ran in this one run on this one broker; sides interleave round by "
        "round; cells read **best / median** of the rounds. The host is shared and noisy.",
        "",
        "## Targets (issue 17)",
        "",
        "Ratios are agentbus over its peer, of the medians and of the bests of the rounds "
        "(latency and CPU: lower is better; rates: higher). The verdict is the median's.",
        "",
        *targets_table([t for t in targets if t["issue"] == 17]),
    ]
    if earlier := [t for t in targets if t["issue"] is None]:
        lines += ["", "### Earlier goals still kept", "", *targets_table(earlier)]
    if rr := results.get("request_response"):
        p, rows = rr["params"], []
        for side, s in rr["summary"].items():
            procs = [key.removeprefix("per_s_x") for key in s if key.startswith("per_s_x")]
            rows.append([side, *(_bm(s[k]) for k in ("p50_us", "p99_us", "client_cpu_us",
                         "server_cpu_us")), *(_bm(s[f"per_s_x{k}"]) for k in procs),
                         _bm(s[f"server_cpu_us_x{procs[-1]}"])])  # fmt: skip
        lines += [
            "",
            f'## Request/response (echo of `{{"i": n}}` in a request envelope; latency: '
            f"{p['rounds']} rounds of {p['requests']:,} sequential requests per side; "
            f"throughput: {p['load_rounds']} rounds of {p['seconds']:g} s, {p['window']} in "
            f"flight per client process)",
            "",
            *table("side|p50 µs>|p99 µs>|CPU µs/req sequential, client>|server>|req/s, 1 "
                    "client>|req/s, 4 clients>|server CPU µs/req, 4 clients>", rows),
            "",
            "faststream: `await broker.request(...)` (direct reply-to; FastStream serialises "
            "its requests with a lock, one in flight per process); faststream-rq: the same "
            "FastStream server asked by publishing with `reply_to` a standing reply queue.",
        ]  # fmt: skip
    if fan := results.get("fanout"):
        p = fan["params"]
        rows = [(f"{n:,}", side, _bm(row["us_per_subtask"]), _bm(row["per_s"]),
                 f"{row['seconds']['best']:.3f}", f"{row['tracemalloc_peak'] / 1e6:.2f} MB",
                 _n(row["tracemalloc_peak"] / n), f"{row['rss_peak_delta'] / 1e6:.1f} MB")
                for n in p["sizes"] for side, by_n in fan["summary"].items()
                for row in [by_n[str(n)]]]  # fmt: skip
        lines += [
            "",
            f"## Fan-out and fan-in of N subtasks ({p['workers']} worker processes per side x "
            f"concurrency {p['concurrency']}, at most {p['max_parallel']} in flight, then one "
            f"fan-in over all results; {p['rounds']} rounds, 2 more for N <= 100)",
            "",
            *table("N>|side|µs per subtask>|subtasks/s>|plan s>|peak memory (tracemalloc)>|"
                    "B per subtask>|leader RSS peak growth>", rows),
            "",
            "Peak memory: agentbus is the in-memory case (tracemalloc over "
            "Plan.model_validate + PlanRunner.run on the in-memory bus); aio-pika and faststream "
            "a tracemalloc-traced run of their in-process leader on the broker. RSS growth: the "
            "leader process's VmHWM over its RSS before the run (median; this process for "
            "aio-pika and faststream).",
            "faststream: FastStream's own `broker.request`, gathered over the same window "
            "(its RPC lock lets one request per broker be in flight); faststream-rq: a "
            "FastStream publisher with a standing reply queue and correlation ids, the window "
            "in flight. Same FastStream workers, messages and durability for both.",
        ]  # fmt: skip
        if fan["cap_note"]:
            lines.append(f"Message cap: {fan['cap_note']}.")
    if registry := results.get("registry"):
        rows = [(f"{f['agents']:,}", f"{f['interval_s']:g} s{_joining(f)}",
                 _n(f["beats_offered_per_s"]), _n(f["beats_achieved_per_s"]),
                 f"{f['registry_cpu_cores']:.2f} core", _n(f["cpu_per_heartbeat_us"]),
                 f["registry_backlog"],
                 f"{f['queue_lag_p50_s'] * 1000:.0f} / {f['queue_lag_max_s'] * 1000:.0f} ms",
                 "-" if f["known_agents"] is None else f"{f['known_agents']:,}",
                 f"{_seconds(f['detect_p50_s'])} / {_seconds(f['detect_max_s'])}",
                 len(f["false_offline"]), "PASS" if f["keeps_up_pass"] else "MISS")
                for f in registry]  # fmt: skip
        lines += [
            "",
            "## Registry (simulated agents beating, from this process and --senders children)",
            "",
            *table("agents>|interval>|beats/s offered>|sent>|registry CPU>|CPU µs/beat>|"
                    "backlog>|queue lag p50 / max>|known>|detection p50 / max>|false offline>|"
                    "keeps up", rows),
            "",
            "Queue lag: a `list_agents` request queued behind the heartbeats in the registry's "
            "own queue (3 intervals = no answer). Backlog: ready messages in that queue at the "
            "window's end (fewest of 3 looks). Detection: silenced agents to their `agent_offline` "
            "(bound: 3 intervals + 0.3 s). CPU per beat includes the registry's fixed costs "
            "(its sweeps, own heartbeat, AMQP heartbeats), which dominate at 100 agents.",
        ]  # fmt: skip
    if startup := results.get("startup"):
        ms = {key: [s * 1000 for s in startup[key]] for key in ("import_s", "deps_import_s")}
        ready = harness.best_median(startup["ready_s"])
        lines += [
            "",
            f"## Startup ({len(startup['ready_s'])} fresh processes each; best / median)",
            "",
            f"- `import agentbus`: {_bm(harness.best_median(ms['import_s']))} ms; its third-party "
            f"dependencies alone: {_bm(harness.best_median(ms['deps_import_s']))} ms "
            f"({', '.join(startup['deps'])})",
            "- heaviest of agentbus's own imports (cumulative, `-X importtime`): "
            + ", ".join(f"{name} {us / 1000:.0f} ms" for us, name in startup["heaviest"]),
            f"- `agentbus run` to ready: {ready['best']:.3f} / {ready['median']:.3f} s",
        ]
    if codec := results.get("codec"):
        rows = [(_size(c["payload_bytes"]), f"{c['envelope_bytes']:,}",
                 *(f"{c[f'{k}_us']:,.1f}" for k in ("encode", "decode", "orjson_dumps",
                                                    "orjson_loads"))) for c in codec]  # fmt: skip
        lines += ["", "## Codec (one request envelope; p50 µs)", "",
                  *table("payload>|envelope bytes>|encode>|decode>|orjson.dumps>|orjson.loads>",
                          rows)]  # fmt: skip
    for key, title in STUDIES.items():
        if study := results.get(key):  # a row per variant, a column per figure, the ratios
            rows, figures = study["figures"], study["figures"].values()
            keys = list(dict.fromkeys(key for row in figures for key in row))
            head = "|".join(["", *(f"{k.replace('_', ' ')}>" for k in keys)])
            lines += ["", f"## {title.format(**study['params'])}", "",
                      *table(head, ([name, *(_figure(row.get(k)) for k in keys)]
                                     for name, row in rows.items()))]  # fmt: skip
            if ratios := study["ratios"]:
                ratio = ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
                lines += ["", f"Ratios: {ratio}."]
    return "\n".join(lines) + "\n"


def _figure(value: float | str | None) -> str:
    if value is None or isinstance(value, str):
        return value or "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def chart(results: dict[str, Any], path: Path) -> Path | None:
    """Fan-out latency, throughput and memory against N as a PNG; None without matplotlib."""
    if (fan := results.get("fanout")) is None:
        return None
    try:
        import matplotlib  # optional: the suite runs without it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sizes = fan["params"]["sizes"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), constrained_layout=True)
    panels = [
        ("Plan latency (submit to aggregate)", "seconds, best of rounds (log)", "seconds"),
        ("Fan-out throughput", "subtasks per second, best of rounds", "per_s"),
        ("Leader-side peak memory", "MB, tracemalloc peak (log)", "memory"),
    ]
    for ax, (title, ylabel, key) in zip(axes, panels, strict=True):
        for side, rows in fan["summary"].items():
            if key == "memory":
                ys = [rows[str(n)]["tracemalloc_peak"] / 1e6 for n in sizes]
            else:
                ys = [rows[str(n)][key]["best"] for n in sizes]
                medians = [rows[str(n)][key]["median"] for n in sizes]
                ax.plot(sizes, medians, ":", color=COLORS[side], alpha=0.6)
            ax.plot(sizes, ys, "o-", color=COLORS[side], label=side)
        ax.set(xscale="log", yscale="linear" if key == "per_s" else "log", title=title,
               xlabel="N subtasks per plan (log)", ylabel=ylabel)  # fmt: skip
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes[1].set_ylim(bottom=0)
    fig.suptitle(f"agentbus vs raw aio-pika vs FastStream, one broker ({results['mode']} run "
                 f"{results['started']}; dotted: median)")  # fmt: skip
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
