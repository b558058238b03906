"""suite.py's verdicts on issue 17's targets (tightened by issues 27 and 42), and its report."""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Iterable
from typing import Any

AGENT_P50_VS_RAW = 1.05  # agent / aio-pika, both persistent and confirmed
TRANSIENT_P50_VS_MIN = 1.10  # agent-transient / raw-min
THROUGHPUT_VS_RAW = 1.0  # agent / aio-pika, 1 and 4 client processes
SERVER_CPU_VS_RAW = 1.05  # agent / aio-pika, server CPU per request under 4 clients
FANOUT_VS_RAW = 0.95
DURABLE_VS_PLAIN = 1.5  # a one-step plan's p50, journaled / --no-durable
FACE_VS_SDK = 0.9  # calls/s, the A2A gateway and agentbus mcp / their SDK's server alone
GATEWAY, MCP = "gateway: 1 process, tasks in memory", "agentbus mcp: 1 process"
FANOUT_VS_FASTSTREAM = 2.0  # FastStream's own broker.request
# what agentbus[fast] gives: agent on uvloop against raw aio-pika on asyncio's loop
UVLOOP_P50_VS_RAW = 1.0  # below: faster
UVLOOP_THROUGHPUT_VS_RAW = 1.0  # above: faster
RSS_PER_SUBTASK = 1000  # bytes: leader RSS growth over the plan, per subtask
REGISTRY_AGENTS, REGISTRY_INTERVAL = 50_000, 5.0
REGISTRY_CPU = 1.0  # cores
READY_SECONDS = 0.5
ECHO = ("(`Bus.serve` echo; {rounds} rounds of {requests:,} sequential requests, then "
        "{seconds:g} s with {window} in flight; medians)")  # fmt: skip
FACE = ("({count} sequential calls a path; throughput: {workers} concurrent callers for "
        "{seconds:g} s")  # fmt: skip
STUDIES = {  # the sections with a row per variant and a column per figure, by results key
    "audit": f"Audit stream off and on {ECHO}", "queue_type": f"Classic or quorum queues {ECHO}",
    "presence": f"The presence check {ECHO}, and a request to a stopped service",
    "durable": "Durable plans: the leader's journal ({subtasks:,} echo subtasks, {rounds} "
    "rounds, registry, leader and two workers in one process; medians)",
    "gateway": f"The A2A gateway against the a2a-sdk's server alone {FACE}; {{cpus}} cores)",
    "mcp": f"MCP tool calls, both protocol eras, against a direct bus request {FACE})",
    "mcp_workers": f"agentbus mcp over HTTP ({{era}}) against the MCP SDK's server {FACE})",
    "seams": "Seams: each fast path against the library's public way (µs per call)",
    "dedup": f"The de-duplication window or the Redis store {ECHO}; the store alone",
    "questions": "Questions: plain and asked ({rounds} rounds), the RSS of {questions:,} open",
    "maps": "A step mapped over {items:,} items against a plan of as many steps ({rounds} rounds)",
    "artifacts": "Artifacts of {sizes} MiB ({chunks} KiB chunks) against plain stream messages",
    "schedules": "Schedules: every second for {minutes:g} min, {killed} SIGKILLed and started "
    "again; each tick once: {once_each}",
}  # fmt: skip
UNITS = {"x": "{:.2f}", "B": "{:,.0f} B", "s": "{:.3f} s", "ms": "{:,.0f} ms",
         "core": "{:.2f} core", "beats/s": "{:,.0f} beats/s"}  # fmt: skip
AT_MOST, AT_LEAST = operator.le, operator.ge
Compare = Callable[[float, float], bool]
Stats = dict[str, dict[str, float]]  # side: its best and median


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _target(name: str, median: float | None, best: float | None,
            goal: tuple[Compare, float] | None, detail: str, *, unit: str = "x",
            ok: bool | None = None, goal_text: str | None = None) -> dict[str, Any]:  # fmt: skip
    """One row: ``goal`` (compare, bound) judges the median and best, ``ok`` overrides it."""
    text = goal_text or ""
    passed = best_passed = ok
    if goal is not None:
        compare, bound = goal
        text = text or f"{'<=' if compare is AT_MOST else '>='} {_unit(bound, unit)}"
        if median is not None and ok is None:
            passed = compare(median, bound)
        best_passed = best is not None and compare(best, bound) and ok is not False
    verdict = "measured" if passed is None else "PASS" if passed else "MISS"
    if passed is False and best_passed:
        verdict = "MISS (best PASS)"
    return {"target": name, "median": median, "best": best, "unit": unit, "goal": text,
            "pass": passed, "verdict": verdict, "detail": detail}  # fmt: skip


def _unit(value: float | None, unit: str) -> str:
    return "-" if value is None else UNITS[unit].format(value)


def _ratio(stats: Stats, side: str, peer: str) -> tuple[float, float] | None:
    """(median ratio, best ratio) of two sides' best/median figures; None if one is missing."""
    if side not in stats or peer not in stats:  # suite.py --sides left one out
        return None
    a, b = stats[side], stats[peer]
    return a["median"] / b["median"], a["best"] / b["best"]


def _pair(stats: Stats, side: str, peer: str, unit: str) -> str:
    a, b = stats[side], stats[peer]
    return (f"{side} {_n(a['median'])} vs {peer} {_n(b['median'])} {unit} median, "
            f"{_n(a['best'])} vs {_n(b['best'])} best")  # fmt: skip


def _ratio_rows(stats: Stats, unit: str, *rows: tuple[Any, ...]) -> list[dict[str, Any]]:
    """A row for each (name, side, peer, compare, bound, what[, more]) whose sides both ran."""
    return [_target(name, *r, (compare, bound),
                    f"{what}: {_pair(stats, side, peer, unit)}{''.join(more)}")
            for name, side, peer, compare, bound, what, *more in rows
            if (r := _ratio(stats, side, peer))]  # fmt: skip


def _also(stats: Stats, side: str, peer: str, what: str) -> str:
    """``; what: median, best`` of another ratio, if both sides ran."""
    r = _ratio(stats, side, peer)
    return f"; {what}: {r[0]:.2f} median, {r[1]:.2f} best" if r else ""


def rr_targets(rr: dict[str, Any]) -> list[dict[str, Any]]:
    s = rr["summary"]

    def figure(key: str) -> Stats:
        return {side: s[side][key] for side in s}

    uv = "agent-uvloop (server and clients on uvloop) vs aio-pika on asyncio's loop"
    p50 = figure("p50_us")
    procs = sorted(rr["params"]["procs"])
    clients = {k: f"{k} client process{'es' if k > 1 else ''}" for k in procs}
    out = _ratio_rows(p50, "µs",
        ("request/response p50, agent / aio-pika", "agent", "aio-pika", AT_MOST,
         AGENT_P50_VS_RAW, "persistent, confirmed, durable queues"),
        ("request/response p50, agent-transient / raw-min", "agent-transient", "raw-min",
         AT_MOST, TRANSIENT_P50_VS_MIN, "transient, no confirms"),
        ("uvloop: request/response p50, agent-uvloop / aio-pika", "agent-uvloop", "aio-pika",
         AT_MOST, UVLOOP_P50_VS_RAW, uv, _also(p50, "agent-uvloop", "agent",
                                               "agent-uvloop / agent (asyncio)")))  # fmt: skip
    for k in procs:
        rate = figure(f"per_s_x{k}")
        out += _ratio_rows(rate, "req/s", (
            f"throughput, {clients[k]}, agent / aio-pika", "agent", "aio-pika", AT_LEAST,
            THROUGHPUT_VS_RAW, "durability-matched raw (persistent, confirmed)",
            _also(rate, "agent-transient", "raw-min", "agent-transient / raw-min")), (
            f"uvloop: throughput, {clients[k]}, agent-uvloop / aio-pika", "agent-uvloop",
            "aio-pika", AT_LEAST, UVLOOP_THROUGHPUT_VS_RAW, uv))  # fmt: skip
    sequential = _also(figure("server_cpu_us"), "agent", "aio-pika", "sequential requests")
    return out + _ratio_rows(figure(f"server_cpu_us_x{procs[-1]}"), "µs", (
        "server CPU per request, agent / aio-pika", "agent", "aio-pika", AT_MOST,
        SERVER_CPU_VS_RAW, f"under {procs[-1]} client processes", sequential))  # fmt: skip


def fanout_targets(fan: dict[str, Any]) -> list[dict[str, Any]]:
    top = max(fan["params"]["sizes"])
    suffix = " (target is for N=10,000)" if top != 10_000 else ""
    per_s = {side: fan["summary"][side][str(top)]["per_s"] for side in fan["summary"]}
    out = _ratio_rows(per_s, "subtasks/s",
        (f"fan-out N={top:,}, leader / aio-pika{suffix}", "agentbus", "aio-pika", AT_LEAST,
         FANOUT_VS_RAW, f"N={top:,}, the leader without its journal (--no-durable) against a "
         "raw aio-pika leader in-process"),
        (f"fan-out N={top:,}, leader / faststream{suffix}", "agentbus", "faststream", AT_LEAST,
         FANOUT_VS_FASTSTREAM, f"N={top:,}, FastStream's own broker.request"))  # fmt: skip
    growth = [run["rss_peak_delta"] / top for run in fan["timed"]["agentbus"][str(top)]]
    detail = (f"N={top:,}: the `agentbus leader` process's VmHWM over its RSS before the plan, "
              f"per subtask; rounds {', '.join(_n(g) for g in growth)} B")  # fmt: skip
    return [*out, _target(f"leader RSS growth per subtask{suffix}", statistics.median(growth),
                          min(growth), (AT_MOST, RSS_PER_SUBTASK), detail, unit="B",
                          goal_text=f"< {RSS_PER_SUBTASK:,} B")]  # fmt: skip


def registry_targets(registry: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the cases at the highest beat rate: held once joined, and joining at once."""
    top = max(f["agents"] / f["interval_s"] for f in registry)
    return [row for f in registry if f["agents"] / f["interval_s"] == top
            for row in registry_rows(f)]  # fmt: skip


def registry_rows(case: dict[str, Any]) -> list[dict[str, Any]]:
    agents, interval, registries = case["agents"], case["interval_s"], case.get("registries", 1)
    suffix = (f", {registries} registries sharing" if registries > 1 else "") + (
        f", joining over {ramp:g} s" if (ramp := case.get("ramp_s")) else ", all joining at once"
    )
    if (agents, interval) != (REGISTRY_AGENTS, REGISTRY_INTERVAL):
        suffix += f" (target is for {REGISTRY_AGENTS:,} every {REGISTRY_INTERVAL:g} s)"
    offered, sent = case["beats_offered_per_s"], case["beats_achieved_per_s"]
    processed = case["beats_processed_per_s"]
    holds = processed >= 0.95 * offered
    short = "" if sent >= 0.95 * offered else " (the simulator fell short of the offer)"
    held = (
        f"{_n(sent)} of {_n(offered)} beats/s sent{short} from {case['senders'] or 1} "
        f"process(es), {_n(processed)} processed; beat lag max "
        f"{(case['beat_lag_max_s'] or 0) * 1000:,.0f} ms (backlog, queue lag, known: below)"
    )
    cores = case["registry_cpu_cores"] / registries
    cpu = f"host busy {case['host_busy_cores']:.2f} of {case['host_cores']} cores"
    if (broker := case.get("broker_cpu_cores")) is not None:
        cpu += f" (broker {broker:.2f}, simulator {case['generator_cpu_cores']:.2f})"
    if holds:  # the CPU of a registry that does not keep up says nothing of the target
        cpu = f"{_n(case['cpu_per_heartbeat_us'])} µs of registry CPU per beat; {cpu}"
        cpu += f"; {case['registry_cpu_cores']:.2f} cores in all" if registries > 1 else ""
    else:
        cpu = f"not holding the rate ({_n(processed)} of {_n(offered)} beats/s processed); {cpu}"
    cpu += f"; registry RSS {rss / 1e6:,.0f} MB" if (rss := case.get("registry_rss")) else ""
    detect = (
        f"{case['detected']} of {case['killed']} silenced agents reported (more below); "
        f"bound {case['detect_target_s']:.1f} s = 3 intervals + sweep slack"
    )
    if case.get("beats_lost") is not None:  # the registry's own word on its load
        said = "said it was overloaded" if case.get("overloaded") else "not overloaded"
        detect += f"; {case['beats_lost']:,} beats known lost, {said}"
    return [
        _target(f"registry holds {agents:,} agents beating every {interval:g} s{suffix}",
                processed, None, None, held, unit="beats/s", ok=case["keeps_up_pass"],
                goal_text=f"{_n(offered)} beats/s, no backlog or lag, all known"),
        _target(f"registry CPU holding that rate{suffix}" + (" (each)" if registries > 1 else ""),
                cores, None, (AT_MOST, REGISTRY_CPU), cpu, unit="core",
                goal_text=f"< {REGISTRY_CPU:g} core", ok=holds and cores < REGISTRY_CPU),
        _target(f"registry offline detection, no false offlines{suffix}", case["detect_max_s"],
                None, None, detect, unit="s", ok=case["detect_target_pass"],
                goal_text=f"<= {case['detect_target_s']:.1f} s, 0 false"),
    ]  # fmt: skip


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


def study_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 42's rows, from the ratios of the sections' medians: durable plans, the faces."""
    rows = (("durable", "one-step plan p50, durable / plain", AT_MOST, DURABLE_VS_PLAIN),
            ("gateway", f"throughput, {GATEWAY} / SDK alone", AT_LEAST, FACE_VS_SDK),
            ("mcp_workers", f"throughput, {MCP} / SDK alone", AT_LEAST, FACE_VS_SDK))  # fmt: skip
    return [_target(name, r, None, (compare, bound), "the section's table, below")
            for key, name, compare, bound in rows
            if (r := results.get(key, {}).get("ratios", {}).get(name))]  # fmt: skip


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of the sections that ran."""
    rows = {"request_response": rr_targets, "fanout": fanout_targets,
            "registry": registry_targets, "startup": startup_targets}  # fmt: skip
    made = [row for key, make in rows.items() if (s := results.get(key)) for row in make(s)]
    return made + study_targets(results)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _known(case: dict[str, Any]) -> str:
    return "-" if case["known_agents"] is None else f"{case['known_agents']:,}"


def _cell(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or "-"
    if isinstance(value, dict):  # a best / median pair
        return f"{_n(value['best'])} / {_n(value['median'])}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def table(head: str, rows: Any) -> list[str]:
    """A Markdown table of ``rows``; ``head``: the columns, ``|``-separated, ``>`` right-aligned."""
    names = head.split("|")
    lines = ["| " + " | ".join(name.removesuffix(">") for name in names) + " |"]
    lines.append("|" + "|".join("---:" if name.endswith(">") else "---" for name in names) + "|")
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def grid(first: str, rows: dict[str, dict[str, Any]], keys: Iterable[str] = ()) -> list[str]:
    """A table with a row per name of ``rows`` and a column per key (all of them by default)."""
    keys = list(keys) or list(dict.fromkeys(key for row in rows.values() for key in row))
    head = "|".join([first, *(f"{key.replace('_', ' ')}>" for key in keys)])
    return table(head, ([name, *(_cell(row.get(key)) for key in keys)]
                        for name, row in rows.items()))  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    m = results["meta"]
    lines = [
        f"# agentbus benchmark suite ({results['mode']}), {results['started']}", "",
        f"Host: {m['cpus']} CPUs, {m['platform']}, load average {m['load_average']} at start; "
        f"Python {m['python']}; RabbitMQ {m['broker']}; " + ", ".join(m["packages"]) + ".",
        "One run on one broker, the sides interleaved round by round; cells read **best / "
        "median** of the rounds.", "", "## Targets (issues 17 and 42)", "",
        "Ratios are agentbus over its peer (latency and CPU: lower is better; rates: higher); "
        "the verdict is the median's.", "",
        *table("target|median>|best>|goal|verdict|detail", (
            (t["target"], _unit(t["median"], t["unit"]), _unit(t["best"], t["unit"]), t["goal"],
             t["verdict"], t["detail"]) for t in results["targets"])),
    ]  # fmt: skip
    if rr := results.get("request_response"):
        p = rr["params"]
        lines += [
            "", f"## Request/response ({p['rounds']} rounds of {p['requests']:,} requests in a "
            f"row a side, then {p['load_rounds']} of {p['seconds']:g} s with {p['window']} in "
            "flight a client process; CPU µs a request)", "",
            *grid("side", rr["summary"]), "",
            "faststream: `broker.request` (direct reply-to, one in flight per process).",
        ]  # fmt: skip
    if fan := results.get("fanout"):
        p = fan["params"]
        rows = {f"N={n:,} {side}": {
            "µs per subtask": row["us_per_subtask"], "subtasks/s": row["per_s"],
            "leader RSS peak growth": f"{row['rss_peak_delta'] / 1e6:.1f} MB"}
            for n in p["sizes"] for side, by_n in fan["summary"].items()
            for row in [by_n[str(n)]]}  # fmt: skip
        lines += [
            "", f"## Fan-out and fan-in of N subtasks ({p['workers']} worker processes per "
            f"side x concurrency {p['concurrency']}, at most {p['max_parallel']} in flight, then "
            f"one fan-in over all results; {p['rounds']} rounds, 2 more for N <= 100)", "",
            *grid("N, side", rows), "",
            "RSS growth: the leader's VmHWM over its RSS before (median; this process for peers).",
            *([f"Message cap: {fan['cap_note']}."] if fan["cap_note"] else []),
        ]  # fmt: skip
    if registry := results.get("registry"):
        rows = {f"{f['agents']:,} every {f['interval_s']:g} s" + (
            f", joining over {f['ramp_s']:g} s" if f.get("ramp_s") else "") + (
            f", {k} sharing" if (k := f.get("registries", 1)) > 1 else ""): {
            "beats/s offered": f["beats_offered_per_s"], "sent": f["beats_achieved_per_s"],
            "registry CPU": f"{f['registry_cpu_cores']:.2f} core",
            "CPU µs/beat": f["cpu_per_heartbeat_us"], "backlog": str(f["registry_backlog"]),
            "queue lag p50 / max": f"{f['queue_lag_p50_s'] * 1000:.0f} / "
            f"{f['queue_lag_max_s'] * 1000:.0f} ms",
            "known": _known(f),
            "detection p50 / max": f"{_seconds(f['detect_p50_s'])} / "
            f"{_seconds(f['detect_max_s'])}", "false offline": str(len(f["false_offline"])),
            "keeps up": "PASS" if f["keeps_up_pass"] else "MISS"} for f in registry}  # fmt: skip
        lines += [
            "", "## Registry (simulated agents beating, from this process and --senders "
            "children)", "", *grid("agents, interval", rows), "",
            "Queue lag: a `list_agents` behind the beats; backlog: ready messages left after; "
            "detection: silenced agents to `agent_offline` (bound: 3 intervals + 0.3 s).",
        ]  # fmt: skip
    if codec := results.get("codec"):
        rows = {c["payload"]: c for c in codec}
        keys = ("envelope_bytes", "encode_us", "decode_us", "orjson_dumps_us", "orjson_loads_us")
        lines += ["", "## Codec (one request envelope; p50 µs)", "", *grid("payload", rows, keys)]
    for key, title in STUDIES.items():
        if study := results.get(key):
            lines += ["", f"## {title.format(**study['params'])}", "", *grid("", study["figures"])]
            if ratios := study["ratios"]:
                lines += ["", "Ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())]
    return "\n".join(lines) + "\n"
