"""Where a benchmark's processes spend their CPU: py-spy on the processes a command starts.

.venv/bin/python scripts/bench-profile.py --match 'serve agent ' --match 'serve aio-pika ' \
    [--rate 250] [--out DIR] -- .venv/bin/python bench/suite.py --quick --only rr

Each process the command starts whose command line matches a ``--match`` regex (the first
one each) is recorded by ``py-spy record --format raw --gil`` (GIL-holding samples: idle
waits are not counted) until it exits. Then, per process: the share of samples by the
package whose code ran (the leaf frame), the leaf functions that cost most, and library
time charged to the innermost agentbus function under it. Raw stacks stay in --out
(``bench/results/`` by default). py-spy:
``.venv/bin/pip install -e '.[profile]'``; attaching needs ptrace (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
GROUPS = (  # (prefix of the leaf frame's file, group), the first that matches
    ("aiormq/", "aiormq (framing, channels, confirms)"),
    ("pamqp/", "pamqp (frame and property marshalling)"),
    ("aio_pika/", "aio-pika"),
    ("asyncio/", "asyncio (loop, tasks, futures, transports)"),
    ("selectors.py", "asyncio (selector, socket calls)"),
    ("socket.py", "asyncio (selector, socket calls)"),
    ("pydantic", "pydantic (validation, serialization)"),
    ("orjson", "orjson"),
    ("structlog/", "structlog"),
    ("prometheus_client/", "prometheus-client"),
    ("faststream/", "faststream"),
    ("uvloop/", "uvloop"),
)
TOP = 12
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def family(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc (each process's parent in its stat)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(current := todo.pop())
        todo += children.get(current, [])
    return found


def group_of(path: str) -> str:
    """The group a leaf frame's file belongs to (agentbus by subpackage)."""
    if path.startswith("agentbus/"):
        parts = path.split("/")
        return f"agentbus {parts[1].removesuffix('.py')}" if len(parts) > 2 else "agentbus"
    for prefix, group in GROUPS:
        if path.startswith(prefix):
            return group
    return "other (stdlib, interpreter)"


def parsed(lines: Iterable[str]) -> list[tuple[list[tuple[str, str]], int]]:
    """py-spy's raw format: ``frame;frame;... count``, the leaf last."""
    stacks = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for frame in stack.split(";"):
            match = FRAME.match(frame)
            frames.append((match["func"], match["file"]) if match else (frame, ""))
        stacks.append((frames, int(count)))
    return stacks


def report(name: str, stacks: list[tuple[list[tuple[str, str]], int]]) -> str:
    """The three tables for one process, as Markdown."""
    total = sum(count for _, count in stacks) or 1
    groups: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    charged: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        func, path = frames[-1]
        groups[group_of(path)] += count
        leaves[f"{func} ({path})"] += count
        if not path.startswith("agentbus/"):
            ours = [f"{f} ({p})" for f, p in frames if p.startswith("agentbus/")]
            charged[ours[-1] if ours else "(no agentbus frame: the loop itself)"] += count
    out = [f"### {name}: {total:,} samples", "", "| leaf package | share |", "| --- | --- |"]
    out += [f"| {g} | {100 * c / total:.1f} % |" for g, c in groups.most_common()]
    out += ["", "| leaf function | share |", "| --- | --- |"]
    out += [f"| {f} | {100 * c / total:.1f} % |" for f, c in leaves.most_common(TOP)]
    out += ["", "| library time, by the agentbus function under it | share |", "| --- | --- |"]
    out += [f"| {f} | {100 * c / total:.1f} % |" for f, c in charged.most_common(TOP)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", action="append", required=True, help="regex on cmdline")
    parser.add_argument("--rate", type=int, default=250, help="samples a second")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not command or not Path(spy).exists():
        sys.exit("bench-profile.py: needs a command after --, and py-spy (the profile extra)")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    pending = {pattern: re.compile(pattern) for pattern in args.match}
    spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    main_proc = subprocess.Popen(command)
    while main_proc.poll() is None:
        for pid in family(main_proc.pid)[1:]:
            line = ""
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            for pattern, regex in list(pending.items()):
                if regex.search(line) and "py-spy" not in line:
                    del pending[pattern]
                    raw = args.out / f"profile-{stamp}-{len(spies)}.txt"
                    argv = [spy, "record", "--format", "raw", "--gil", "-r", str(args.rate), "-o"]
                    argv += [str(raw), "--pid", str(pid)]
                    spies[pattern] = (subprocess.Popen(argv, stdout=subprocess.DEVNULL), raw)
        time.sleep(0.2)
    for pattern, (proc, raw) in spies.items():
        proc.wait(timeout=60)
        print(f"\n{report(pattern.strip(), parsed(raw.read_text().splitlines()))}\n({raw})")
    for pattern in pending:
        print(f"\nno process matched {pattern!r}")
    sys.exit(main_proc.returncode)


if __name__ == "__main__":
    main()
