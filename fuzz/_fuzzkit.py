"""Shared parts of the fuzz targets: the runner, the findings log and a JSON-aware mutator.

Not imported by agentbus or its tests. This module must not import ``agentbus`` at
module level: the targets import agentbus under ``atheris.instrument_imports`` first,
so that the coverage of its Python code guides the fuzzer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shlex
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

try:  # atheris is the optional extra ``agentbus[fuzz]``; --replay works without it.
    import atheris
except ImportError:  # pragma: no cover - depends on the environment
    atheris = None

FUZZ_DIR = Path(__file__).resolve().parent
SUMMARY_EVERY = 5.0  # seconds between summary.json writes (libFuzzer exits without unwinding)


class PropertyViolation(AssertionError):
    """A property of a target does not hold for an input."""

    def __init__(self, signature: str, detail: str = "") -> None:
        super().__init__(f"{signature}: {detail}" if detail else signature)
        self.signature = signature
        self.detail = detail


def instrumented() -> AbstractContextManager[Any]:
    """Instrument the agentbus modules imported in the block (a no-op without atheris)."""
    if atheris is None:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=["agentbus"])


def quiet() -> None:
    """Drop agentbus's log lines (a refused envelope logs a warning): fuzzing is loud enough."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)


def safe_repr(value: object, limit: int = 2000) -> str:
    """``repr`` for a finding's detail: bounded, and safe on deeply nested values."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__}: too deep to repr>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def signature_of(exc: BaseException) -> str:
    """A stable name for an exception: its type and the innermost agentbus frame."""
    if isinstance(exc, PropertyViolation):
        return exc.signature
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/agentbus/" in f.filename] or frames
    if not ours:
        return type(exc).__name__
    frame = ours[-1]
    return f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.name}:{frame.lineno}"


class Findings:
    """Property violations by signature; the smallest input of each is kept on disk.

    Fuzzing goes on after a violation (unless ``stop``), so one known bug does not
    hide the others; libFuzzer's own crash files are only written for a real crash
    of the process (an exception the harness did not expect, or ``--stop``).
    """

    def __init__(self, target: str, directory: Path, *, stop: bool) -> None:
        self.target = target
        self.directory = directory
        self.stop = stop
        self.counts: Counter[str] = Counter()
        self.slow: Counter[str] = Counter()
        self.executions = 0
        self.started = time.monotonic()
        self._last_summary = self.started
        self._kept: dict[str, int] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.bin"):
            self._kept[old.stem] = old.stat().st_size

    def record(self, signature: str, data: bytes, detail: str) -> None:
        """Count a violation; keep its input if it is the first or smallest of its kind."""
        self.counts[signature] += 1
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", signature)[:120]
        kept = self._kept.get(slug)
        if kept is None or len(data) < kept:
            self._kept[slug] = len(data)
            (self.directory / f"{slug}.bin").write_bytes(data)
            (self.directory / f"{slug}.txt").write_text(
                f"{signature}\n\ninput ({len(data)} bytes): {data[:2000]!r}\n\n{detail}\n"
            )
        if self.counts[signature] == 1:
            print(
                f"\n=== {self.target}: NEW FINDING {signature}\n"
                f"input ({len(data)} bytes): {data[:400]!r}\n{detail}",
                file=sys.stderr,
                flush=True,
            )
            self.write_summary()
        if self.stop:
            raise PropertyViolation(signature, detail)

    def tick(self) -> None:
        """Count one input; write summary.json now and then."""
        self.executions += 1
        now = time.monotonic()
        if now - self._last_summary >= SUMMARY_EVERY:
            self._last_summary = now
            self.write_summary()

    def write_summary(self) -> None:
        summary = {
            "target": self.target,
            "executions": self.executions,
            "seconds": round(time.monotonic() - self.started, 1),
            "findings": dict(self.counts.most_common()),
        }
        path = self.directory / "summary.json"
        path.write_text(json.dumps(summary, indent=2) + "\n")


def run_checked(findings: Findings, data: bytes, check: Callable[[bytes], None]) -> None:
    """Run one input through ``check``; violations and unexpected exceptions are findings."""
    findings.tick()
    try:
        check(data)
    except PropertyViolation as exc:
        findings.record(exc.signature, data, exc.detail)
    except Exception as exc:
        detail = "".join(traceback.format_exception(exc))
        findings.record(signature_of(exc), data, detail)


def parse_args(
    description: str, target: str, slow_ms: float = 50.0
) -> tuple[argparse.Namespace, list[str]]:
    """Our options; everything else is passed to libFuzzer (``-max_total_time=600``...)."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument(
        "--replay",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="run these files (or every file in these directories) once, without atheris",
    )
    parser.add_argument(
        "--stop", action="store_true", help="stop at the first finding (libFuzzer crash file)"
    )
    parser.add_argument(
        "--findings",
        type=Path,
        default=FUZZ_DIR / "findings" / target,
        help="where findings are kept (default fuzz/findings/%(prog)s target)",
    )
    parser.add_argument(
        "--slow-ms", type=float, default=slow_ms, help="flag inputs slower than this (ms)"
    )
    return parser.parse_known_args()


def replay_files(paths: Sequence[Path]) -> Iterator[Path]:
    """The files named, and the files in the directories named (not a findings' notes)."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                notes = child.suffix == ".txt" or child.name == "summary.json"
                if child.is_file() and not notes:
                    yield child
        else:
            yield path


def main(
    args: argparse.Namespace,
    libfuzzer_args: list[str],
    findings: Findings,
    test_one_input: Callable[[bytes], None],
    mutator: JsonMutator,
) -> None:
    """Replay files, or fuzz with atheris (the JSON-aware mutator and libFuzzer's own)."""
    if args.replay:
        for path in replay_files(args.replay):
            before = sum(findings.counts.values())
            test_one_input(path.read_bytes())
            verdict = "ok" if sum(findings.counts.values()) == before else "FINDING"
            print(f"{verdict:8} {path}")
        findings.write_summary()
        print(json.dumps(dict(findings.counts), indent=2))
        return
    if atheris is None:
        sys.exit("atheris is not installed: .venv/bin/pip install -e '.[fuzz]' (or use --replay)")
    # libFuzzer runs argv[0] through the shell for -merge, -fork and -jobs: make it
    # "this interpreter, this script, our options", not a script without an exec bit.
    program = [sys.executable, sys.argv[0], "--findings", str(args.findings)]
    program += [f"--slow-ms={args.slow_ms}"] + (["--stop"] if args.stop else [])
    argv0 = " ".join(shlex.quote(part) for part in program)
    atheris.Setup([argv0, *libfuzzer_args], test_one_input, custom_mutator=mutator)
    try:
        atheris.Fuzz()
    finally:
        findings.write_summary()


# -- a mutator that knows JSON --------------------------------------------------------------

_DEEP = "__fuzz_deep_nesting__"

INTERESTING: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
    0.5,
    -0.0,
    1e308,
    5e-324,
    "",
    " ",
    "1.0",
    "1.99",
    "2.0",
    "01.0",
    "1.0000000001",
    "request",
    "response",
    "event",
    "error",
    "success",
    "failure",
    "in_progress",
    "broadcast",
    "2024-05-01T12:30:00Z",
    "2024-05-01T12:30:00",
    "2024-05-01T12:30:00+14:00",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-01:00",
    "2024-02-30T00:00:00Z",
    "1970-01-01",
    "now",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "\u0000",
    "\u00e9\u4e2d\U0001f600",
    "a b",
    "Z" * 128,
    "Z" * 129,
    "!" * 255,
    "!" * 256,
    "x" * 2000,
    [],
    {},
    [[]],
    {"": {}},
    [1, "a", None],
]


class JsonMutator:
    """Mutates a JSON input as a tree (values, keys, types, nesting); else byte-level."""

    def __init__(self, keys: Sequence[str], strings: Sequence[str] = (), tree_share: float = 0.6):
        self.keys = list(keys)
        self.values = INTERESTING + list(strings)
        self.tree_share = tree_share

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < self.tree_share:
            out = self.mutate_tree(data, max_size, rng)
            if out is not None:
                return out
        assert atheris is not None
        return bytes(atheris.Mutate(data, max_size))

    def mutate_tree(self, data: bytes, max_size: int, rng: random.Random) -> bytes | None:
        try:
            tree = json.loads(data)
        except (ValueError, RecursionError):
            return None
        deep: list[int] = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            tree = self._mutate(tree, rng, deep)
        out = self._dump(tree, rng)
        if out is None:
            return None
        for depth in deep:  # deep nesting is spliced in as text: json.dumps would recurse
            nested = ("[" * depth + "0" + "]" * depth).encode()
            out = out.replace(f'"{_DEEP}{depth}"'.encode(), nested, 1)
        return out if len(out) <= max_size else None

    def _mutate(self, tree: Any, rng: random.Random, deep: list[int]) -> Any:
        slots = list(_slots(tree))
        if not slots or rng.random() < 0.05:
            return self._new_value(tree, rng, deep)
        parent, key = rng.choice(slots)
        value = parent[key]
        roll = rng.random()
        if isinstance(parent, dict) and roll < 0.12:
            del parent[key]
        elif isinstance(parent, dict) and roll < 0.27:
            parent[rng.choice(self.keys)] = self._new_value(value, rng, deep)
        elif isinstance(parent, dict) and roll < 0.32:
            parent[self._string(str(key), rng)] = parent.pop(key)
        elif isinstance(parent, list) and roll < 0.37:
            parent.insert(rng.randrange(len(parent) + 1), self._new_value(value, rng, deep))
        else:
            parent[key] = self._new_value(value, rng, deep)
        return tree

    def _new_value(self, old: Any, rng: random.Random, deep: list[int]) -> Any:
        roll = rng.random()
        if roll < 0.45:
            return _copy(rng.choice(self.values))
        if roll < 0.6 and isinstance(old, str):
            return self._string(old, rng)
        if roll < 0.7 and isinstance(old, int | float) and not isinstance(old, bool):
            with contextlib.suppress(OverflowError, ValueError):
                return rng.choice((old + 1, old - 1, -old, old * 2**32, old / 3, int(old)))
            return old
        if roll < 0.78:
            return [old] if rng.random() < 0.5 else {rng.choice(self.keys): old}
        if roll < 0.82:
            depth = rng.choice((64, 300, 1000, 1024, 1025, 3000))
            deep.append(depth)
            return f"{_DEEP}{depth}"
        if roll < 0.9:
            return {rng.choice(self.keys): _copy(rng.choice(self.values))}
        return _copy(old)

    def _string(self, old: str, rng: random.Random) -> str:
        roll = rng.random()
        if roll < 0.25:
            return old + rng.choice(("\u00e9", "\u2028", "\x7f", " ", "-", "_", "%", "\u0000"))
        if roll < 0.45:
            return old[: rng.randrange(len(old) + 1)]
        if roll < 0.6:
            return old * rng.choice((2, 16, 200))
        if roll < 0.8:
            return rng.choice(self.keys)
        return "".join(
            chr(rng.choice((rng.randrange(32, 127), rng.randrange(0x110000))))
            for _ in range(rng.randrange(1, 8))
        )

    def _dump(self, tree: Any, rng: random.Random) -> bytes | None:
        roll = rng.random()
        try:
            if roll < 0.6:
                return json.dumps(tree, separators=(",", ":"), ensure_ascii=False).encode(
                    "utf-8", "surrogatepass"
                )
            if roll < 0.85:
                return json.dumps(tree, ensure_ascii=True).encode()
            return json.dumps(tree, indent=rng.choice((1, 2)), ensure_ascii=False).encode(
                "utf-8", "surrogatepass"
            )
        except (ValueError, RecursionError, TypeError):
            return None


def _slots(tree: Any, limit: int = 300) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value in the tree, breadth first, at most ``limit``."""
    queue = [tree]
    count = 0
    while queue and count < limit:
        node = queue.pop(0)
        if isinstance(node, dict):
            items: Iterator[tuple[Any, Any]] = iter(node.items())
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        for key, value in items:
            count += 1
            yield node, key
            queue.append(value)


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value)) if isinstance(value, list | dict) else value
