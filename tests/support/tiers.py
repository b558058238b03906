"""The tiers of the test suite, side by side: how pytest-xdist shares them, what each took.

A tier is a folder under ``tests/`` (``unit``, ``chaos``, ``cluster`` ...). Under
``--dist loadgroup`` (what ``./scripts/test`` runs; ``pytest_xdist_make_scheduler`` below),
a tier that starts something costly once per session (private RabbitMQ nodes, a cluster,
container images, a Redis) runs whole on one worker, so it starts it once; ``integration``
and ``docs`` go module by module (their fixtures are module-wide at most) and ``unit`` test
by test.

At the end of every run, the terminal summary has a table of the tiers: how many tests,
how they ended, the seconds their tests took (setup, call and teardown; ``busy``) and the
span from the first test's start to the last one's end (``span``; tiers overlap when they run
side by side). ``./scripts/test`` writes the seconds its set-up steps took to the file
named by ``AGENTBUS_SETUP_TIMES`` (``<seconds> <step>`` per line); they head the table.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Tiers whose tests go to the workers one by one, or one module at a time.
_BY_TEST = frozenset({"unit"})
_BY_MODULE = frozenset({"integration", "docs"})

# A test's outcome, worst first: a run reports the worst of its phases.
_RANK = ("failed", "error", "passed", "xfailed", "skipped")


def tier_of(path: Path) -> str:
    """The tier a test module belongs to: its first folder under ``tests/``."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return "other"
    return parts[0] if len(parts) > 1 else "top"


@dataclass
class _Tier:
    outcomes: dict[str, str] = field(default_factory=dict)
    busy: float = 0.0
    first: float = float("inf")
    last: float = 0.0


class TierTable:
    """Counts each tier's tests and seconds from the reports (on xdist's controller too)."""

    def __init__(self) -> None:
        self.tiers: dict[str, _Tier] = {}
        self.began = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tier = self.tiers.setdefault(tier_of(Path(report.fspath)), _Tier())
        tier.busy += report.duration
        start = getattr(report, "start", None)
        stop = getattr(report, "stop", None)
        if start is not None and stop is not None:
            tier.first, tier.last = min(tier.first, start), max(tier.last, stop)
        outcome = _outcome(report)
        before = tier.outcomes.get(report.nodeid, "skipped")
        tier.outcomes[report.nodeid] = min(outcome, before, key=_RANK.index)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tiers:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time per tier")
        write(_row("tier", "tests", "failed", "skipped", "busy s", "span s"))
        for seconds, step in _setup_times():
            write(_row(f"set-up: {step}", "", "", "", f"{seconds:.1f}", ""))
        for name in sorted(self.tiers, key=lambda n: -self.tiers[n].busy):
            tier = self.tiers[name]
            ends = list(tier.outcomes.values())
            failed = sum(o in ("failed", "error") for o in ends)
            skipped = sum(o == "skipped" for o in ends)
            span = f"{max(tier.last - tier.first, 0.0):.1f}"
            write(_row(name, len(ends), failed, skipped, f"{tier.busy:.1f}", span))
        total = f"{sum(t.busy for t in self.tiers.values()):.1f}"
        write(_row("all tiers", "", "", "", total, f"{time.time() - self.began:.1f}"))


def _row(name: str, *cells: object) -> str:
    return f"{name:<32}" + "".join(f"{cell!s:>9}" for cell in cells)


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "failed"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "skipped"
    return "passed" if report.when == "call" else "skipped"


def _setup_times() -> list[tuple[float, str]]:
    path = os.environ.get("AGENTBUS_SETUP_TIMES")
    if not path or not Path(path).is_file():
        return []
    rows = []
    for line in Path(path).read_text().splitlines():
        seconds, _, step = line.partition(" ")
        try:
            rows.append((float(seconds), step))
        except ValueError:
            continue
    return rows


def pytest_configure(config: pytest.Config) -> None:
    """Count the tiers where the reports end up: xdist's controller, or the only process."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(TierTable(), "agentbus-tier-table")


# The order the tiers go to the workers in, the longest first (each worker takes two units
# to start with, then the next as it runs low): what ./scripts/test's table measures.
_LONGEST_FIRST = (
    "cluster", "deploy", "chaos", "gateway", "security", "sites", "integration", "mcp",
    "dashboard", "release", "clients", "dedup", "scenarios", "docs", "unit",
)  # fmt: skip


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist's workers under ``--dist loadgroup``: the longest tiers first."""
    if not getattr(config.option, "loadgroup", False):
        return
    rank = {tier: n for n, tier in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(tier_of(item.path), len(rank)))


def scope_of(nodeid: str) -> str:
    """The work unit a test goes to a worker in: its tier, its module, or itself."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tests":
        return path
    tier = parts[1]
    if tier in _BY_TEST:
        return nodeid
    return path if tier in _BY_MODULE else f"tests/{tier}"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``, share the tests out in the tiers' work units (``scope_of``).

    xdist's own grouping (``xdist_group`` marks) renames each test's node id, which pytest
    9.2 no longer lets a plugin do; this scheduler reads the ids as they are, through
    ``LoadScopeScheduling._split_scope``, the override xdist's own schedulers use
    (tests/unit/test_tiers.py fails when it goes)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the collection's order: the longest tiers first

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return TierScheduling(config, log)
