"""The benchmarks page's chart, made from the page's own table of today's figures.

    .venv/bin/python scripts/bench-chart.py [--page docs/benchmarks.md] [--out SVG]

Reads the rows of the table under ``<!-- benchmark-table -->`` in the page that have a ratio
(the "median of both" column) and a goal (``<= x`` or ``>= x``), turns each so that higher
is better (a latency or CPU ratio, where lower is better, is inverted) and draws it against
its goal: 1.0 is par with the peer. Needs matplotlib (the ``bench`` extra). The SVG
(``docs/img/benchmarks.svg`` unless ``--out``) is written without a date, so the same table
makes the same file.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_GOAL = re.compile(r"^(<=|>=)\s*(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Target:
    """One row: what is compared, its median ratio and its goal, as the page writes them."""

    name: str
    ratio: float
    sign: str  # "<=" (lower is better) or ">="
    goal: float

    @property
    def score(self) -> float:
        """The ratio with higher better: a ``<=`` ratio inverted."""
        return 1 / self.ratio if self.sign == "<=" else self.ratio

    @property
    def par(self) -> float:
        """The goal with higher better."""
        return 1 / self.goal if self.sign == "<=" else self.goal

    @property
    def met(self) -> bool:
        return self.score >= self.par


def targets(page: Path) -> list[Target]:
    """The rows of the page's benchmark table that have a ratio and a goal."""
    text = page.read_text(encoding="utf-8")
    start = text.index("<!-- benchmark-table")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    header, _, *body = rows
    median, goal = header.index("median of both"), header.index("goal")
    found = []
    for cells in body:
        ratio, limit = _NUMBER.search(cells[median]), _GOAL.match(cells[goal])
        if ratio and limit:
            found.append(Target(cells[0], float(ratio[0]), limit[1], float(limit[2])))
    return found


def draw(rows: list[Target], out: Path) -> None:
    """A horizontal bar per target, its goal marked, written as SVG to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "agentbus"  # stable ids: the same table, the same file
    cap = 1.6
    figure, axes = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.2))
    names = [row.name.replace("`", "") for row in reversed(rows)]
    for y, row in enumerate(reversed(rows)):
        colour = "#2e7d32" if row.met else "#c62828"
        axes.barh(y, min(row.score, cap), color=colour, alpha=0.8, height=0.6)
        axes.plot([row.par, row.par], [y - 0.38, y + 0.38], color="black", linewidth=2)
        label = f"{row.score:.2f}" + (" (off the axis)" if row.score > cap else "")
        axes.text(max(min(row.score, cap), row.par) + 0.03, y, label, va="center", fontsize=8)
    axes.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    axes.set_yticks(range(len(rows)), names, fontsize=8)
    axes.set_xlim(0, cap + 0.45)
    axes.set_xlabel("agentbus against its peer, higher is better (1.0: par; black mark: the goal)")
    axes.set_title("Today's figures: green met the goal, red missed it", fontsize=10)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "benchmarks.svg")
    args = parser.parse_args()
    rows = targets(args.page)
    draw(rows, args.out)
    print(f"{args.out}: {len(rows)} targets, {sum(row.met for row in rows)} met")


if __name__ == "__main__":
    main()
