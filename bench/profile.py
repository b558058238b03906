"""Where a benchmark's processes spend their CPU: py-spy on the processes a command starts.

.venv/bin/python bench/profile.py --match 'serve agent ' --match 'serve aio-pika ' \
    [--rate 250] [--out DIR] -- .venv/bin/python bench/suite.py --quick --only rr \
    --sides agent,aio-pika

Runs the command; each process it starts whose command line matches a ``--match`` regex
(the first one each) is recorded by ``py-spy record --format raw --gil`` until it exits
(only the thread holding the GIL is sampled: a loop waiting on its socket and idle threads
are not counted; C code that releases the GIL is missed). Then, per process: the share of
samples by the package whose code was running (the leaf frame: aiormq and pamqp's framing,
asyncio's loop and sockets, pydantic, agentbus by subpackage, ...), the leaf functions that
cost most, and the agentbus functions under which the rest ran (library time charged to the
innermost agentbus frame that called it). The raw stacks stay in --out for a flame graph.
py-spy from PyPI: ``.venv/bin/pip install -e '.[profile]'``; attaching needs ptrace (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
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


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children[todo.pop()]:
            found.append(child)
            todo.append(child)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", action="append", required=True, help="regex on cmdline")
    parser.add_argument("--rate", type=int, default=250, help="samples a second")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not command or not Path(spy).exists():
        sys.exit("bench/profile.py: needs a command after --, and py-spy (the profile extra)")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    pending = {pattern: re.compile(pattern) for pattern in args.match}
    spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    main_proc = subprocess.Popen(command)
    while main_proc.poll() is None:
        for pid in _descendants(main_proc.pid):
            line = _cmdline(pid)
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
