"""suite.py's verdicts, Markdown report and chart (matplotlib optional: no chart without it)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

RR_P50_VS_RAW = 1.3
RR_P50_VS_FASTSTREAM = 0.6
FANOUT_VS_RAW = 0.7
FANOUT_VS_FASTSTREAM = 2.0
MEMORY_SLOPE = 2048  # bytes per extra pending subtask
MEMORY_LINEAR = 1.5  # the slope at the top may grow at most this much over the one below
REGISTRY_AGENTS = 5000
COLORS = {
    "agentbus": "tab:blue",
    "aio-pika": "tab:green",
    "faststream": "tab:red",
    "faststream-rq": "tab:orange",
}


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _target(name: str, value: float | None, goal: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"target": name, "value": value, "goal": goal, "pass": ok, "detail": detail}


def slopes(memory: dict[str, dict[str, Any]]) -> list[tuple[int, int, float]]:
    """(N low, N high, bytes per extra subtask) between consecutive sizes."""
    sizes = sorted(int(n) for n in memory)
    peak = {n: memory[str(n)]["peak_bytes"] for n in sizes}
    return [(a, b, (peak[b] - peak[a]) / (b - a)) for a, b in itertools.pairwise(sizes)]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    if rr := results.get("request_response"):
        s = rr["summary"]
        p50 = {side: s[side]["p50_us"]["best"] for side in s}
        median = {side: s[side]["p50_us"]["median"] for side in s}
        for peer, goal in (("aio-pika", RR_P50_VS_RAW), ("faststream", RR_P50_VS_FASTSTREAM)):
            if "agentbus" not in p50 or peer not in p50:  # suite.py --sides left one out
                continue
            ratio = p50["agentbus"] / p50[peer]
            detail = f"best p50 {_n(p50['agentbus'])} vs {_n(p50[peer])} µs; medians "
            detail += f"{median['agentbus'] / median[peer]:.2f}"
            name = f"request/response p50, agentbus / {peer}"
            out.append(_target(name, ratio, f"<= {goal}", ratio <= goal, detail))
    if fan := results.get("fanout"):
        top = str(max(fan["params"]["sizes"]))
        per_s = {side: fan["summary"][side][top]["per_s"] for side in fan["summary"]}
        peers = [("aio-pika", FANOUT_VS_RAW), ("faststream", FANOUT_VS_FASTSTREAM)]
        peers += [("faststream-rq", FANOUT_VS_FASTSTREAM)] if "faststream-rq" in per_s else []
        for peer, goal in peers:
            ratio = per_s["agentbus"]["best"] / per_s[peer]["best"]
            medians = per_s["agentbus"]["median"] / per_s[peer]["median"]
            detail = f"N={int(top):,}: {_n(per_s['agentbus']['best'])} vs "
            detail += f"{_n(per_s[peer]['best'])} subtasks/s; medians {medians:.2f}"
            name = f"fan-out throughput, leader / {peer}"
            out.append(_target(name, ratio, f">= {goal}", ratio >= goal, detail))
        steps = slopes(fan["memory"]["agentbus"])
        low, high, slope = steps[-1]
        out.append(
            _target(
                f"leader memory per extra subtask, N={low:,} to {high:,}",
                slope,
                f"< {MEMORY_SLOPE} B",
                slope < MEMORY_SLOPE,
                "tracemalloc peak of Plan + PlanRunner (_leader_memory's case)",
            )
        )
        if len(steps) > 1:
            below = steps[-2][2]
            growth = slope / below if below > 0 else float("inf")
            detail = f"{_n(slope)} B/subtask vs {_n(below)} B/subtask for N={steps[-2][0]:,}"
            detail += f" to {steps[-2][1]:,}"
            name = "leader memory linear in N: slope ratio"
            out.append(
                _target(name, growth, f"<= {MEMORY_LINEAR}", growth <= MEMORY_LINEAR, detail)
            )
    if registry := results.get("registry"):
        case = max(registry, key=lambda f: f["agents"])
        detail = (
            f"{_n(case['beats_achieved_per_s'])} of {_n(case['beats_offered_per_s'])} beats/s "
            f"sent, backlog {case['registry_backlog']}, queue lag max "
            f"{case['queue_lag_max_s'] * 1000:.0f} ms, known {case['known_agents']}, detection "
            f"max {_seconds(case['detect_max_s'])} (bound {case['detect_target_s']:.1f} s), "
            f"false offline {len(case['false_offline'])}"
        )
        name = f"registry keeps up: {case['agents']:,} agents, 1 beat/s"
        if case["agents"] != REGISTRY_AGENTS:
            name += f" (target is for {REGISTRY_AGENTS:,})"
        out.append(_target(name, None, "keeps up", case["keeps_up_pass"], detail))
    return out


def _size(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1e6 else f"{n / 1e3:g} KB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _bm(stats: dict[str, float], scale: float = 1.0) -> str:
    return f"{_n(stats['best'] * scale)} / {_n(stats['median'] * scale)}"


def markdown(results: dict[str, Any]) -> str:
    m = results["meta"]
    lines = [
        f"# agentbus benchmark suite ({results['mode']}), {results['started']}",
        "",
        f"Host: {m['cpus']} CPUs, {m['platform']}, load average {m['load_average']} at start; "
        f"Python {m['python']}; RabbitMQ {m['broker']}; " + ", ".join(m["packages"]) + ".",
        "Every comparison ran in this one run on this one broker; sides interleave round by "
        "round; cells read **best / median** of the rounds. The host is shared and noisy.",
        "",
        "## Targets",
        "",
        "| target | value | goal | verdict | detail |",
        "|---|---:|---|---|---|",
    ]
    for t in results["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:,.2f}"
        verdict = "PASS" if t["pass"] else "MISS"
        lines.append(f"| {t['target']} | {value} | {t['goal']} | {verdict} | {t['detail']} |")
    if rr := results.get("request_response"):
        p = rr["params"]
        lines += [
            "",
            f'## Request/response (echo of `{{"i": n}}` in a request envelope; latency: '
            f"{p['rounds']} rounds of {p['requests']:,} sequential requests per side; "
            f"throughput: {p['load_rounds']} rounds of {p['seconds']:g} s, {p['window']} in "
            f"flight per client process)",
            "",
            "| side | p50 µs | p99 µs | CPU µs/req sequential, client | server "
            "| req/s, 1 client | req/s, 4 clients | server CPU µs/req, 4 clients |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for side, s in rr["summary"].items():
            procs = [key.removeprefix("per_s_x") for key in s if key.startswith("per_s_x")]
            rates = [_bm(s[f"per_s_x{k}"]) for k in procs]
            cpu = _bm(s[f"server_cpu_us_x{procs[-1]}"])
            lines.append(
                f"| {side} | {_bm(s['p50_us'])} | {_bm(s['p99_us'])} | "
                f"{_bm(s['client_cpu_us'])} | {_bm(s['server_cpu_us'])} | " + " | ".join(rates)
                + f" | {cpu} |"
            )  # fmt: skip
        lines += [
            "",
            "faststream: `await broker.request(...)` (direct reply-to; FastStream serialises "
            "its requests with a lock, one in flight per process); faststream-rq: the same "
            "FastStream server asked by publishing with `reply_to` a standing reply queue.",
        ]
    if fan := results.get("fanout"):
        p = fan["params"]
        lines += [
            "",
            f"## Fan-out and fan-in of N subtasks ({p['workers']} worker processes per side x "
            f"concurrency {p['concurrency']}, at most {p['max_parallel']} in flight, then one "
            f"fan-in over all results; {p['rounds']} rounds, 2 more for N <= 100)",
            "",
            "| N | side | µs per subtask | subtasks/s | plan s | peak memory (tracemalloc) "
            "| B per subtask | leader RSS peak growth |",
            "|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for n in p["sizes"]:
            for side, rows in fan["summary"].items():
                row = rows[str(n)]
                peak = row["tracemalloc_peak"]
                lines.append(
                    f"| {n:,} | {side} | {_bm(row['us_per_subtask'])} | {_bm(row['per_s'])} "
                    f"| {row['seconds']['best']:.3f} | {peak / 1e6:.2f} MB | {_n(peak / n)} "
                    f"| {row['rss_peak_delta'] / 1e6:.1f} MB |"
                )
        lines += [
            "",
            "Peak memory: agentbus is _leader_memory's case (tracemalloc over "
            "Plan.model_validate + PlanRunner.run on the in-memory bus); aio-pika and faststream "
            "a tracemalloc-traced run of their in-process leader on the broker. RSS growth: the "
            "leader process's VmHWM over its RSS before the run (median; this process for "
            "aio-pika and faststream).",
            "faststream: FastStream's own `broker.request`, gathered over the same window "
            "(its RPC lock lets one request per broker be in flight); faststream-rq: a "
            "FastStream publisher with a standing reply queue and correlation ids, the window "
            "in flight. Same FastStream workers, messages and durability for both.",
        ]
        if fan["cap_note"]:
            lines.append(f"Message cap: {fan['cap_note']}.")
    if registry := results.get("registry"):
        lines += [
            "",
            "## Registry (simulated agents, 1 beat/s each, from this process)",
            "",
            "| agents | beats/s offered | sent | registry CPU | CPU µs/beat | backlog | queue lag "
            "p50 / max | known | detection p50 / max | false offline | keeps up |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for f in registry:
            lag = f"{f['queue_lag_p50_s'] * 1000:.0f} / {f['queue_lag_max_s'] * 1000:.0f} ms"
            detect = f"{_seconds(f['detect_p50_s'])} / {_seconds(f['detect_max_s'])}"
            lines.append(
                f"| {f['agents']:,} | {_n(f['beats_offered_per_s'])} | "
                f"{_n(f['beats_achieved_per_s'])} | {f['registry_cpu_cores']:.2f} core | "
                f"{_n(f['cpu_per_heartbeat_us'])} | {f['registry_backlog']} | {lag} | "
                f"{f['known_agents']} | {detect} | {len(f['false_offline'])} | "
                f"{'PASS' if f['keeps_up_pass'] else 'MISS'} |"
            )
        lines += [
            "",
            "Queue lag: a `list_agents` request queued behind the heartbeats in the registry's "
            "own queue (3 s = no answer). Backlog: ready messages in that queue at the window's "
            "end (fewest of 3 looks). Detection: silenced agents to their `agent_offline` "
            "(bound: 3 intervals + 0.3 s). CPU per beat includes the registry's fixed costs "
            "(its sweeps, own heartbeat, AMQP heartbeats), which dominate at 100 agents.",
        ]
    if codec := results.get("codec"):
        lines += [
            "",
            "## Codec (one request envelope; p50 µs)",
            "",
            "| payload | envelope bytes | encode | decode | orjson.dumps | orjson.loads |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for c in codec:
            lines.append(
                f"| {_size(c['payload_bytes'])} | {c['envelope_bytes']:,} | "
                f"{c['encode_us']:,.1f} | {c['decode_us']:,.1f} | {c['orjson_dumps_us']:,.1f} | "
                f"{c['orjson_loads_us']:,.1f} |"
            )
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: Path) -> Path | None:
    """Fan-out latency, throughput and memory against N as a PNG; None without matplotlib."""
    fan = results.get("fanout")
    if fan is None:
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
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        if key != "per_s":
            ax.set_yscale("log")
        ax.set_xlabel("N subtasks per plan (log)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes[1].set_ylim(bottom=0)
    fig.suptitle(
        f"agentbus vs raw aio-pika vs FastStream, one broker ({results['mode']} run "
        f"{results['started']}; dotted: median)"
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
