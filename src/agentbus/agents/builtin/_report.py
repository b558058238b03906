"""The ``report`` agent: Markdown reports, generic or from the ``code`` agent's metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, Self

from pydantic import BaseModel, Field, model_validator

from agentbus.agents._agent import Agent
from agentbus.agents._skills import skill
from agentbus.agents.builtin._code import (
    HOTSPOT_COMPLEXITY,
    FileMetrics,
    FunctionMetrics,
    is_hotspot,
)

__all__ = [
    "Cell",
    "CodeReport",
    "Hotspot",
    "Rendered",
    "ReportAgent",
    "Section",
    "Table",
    "render_markdown",
]

Cell = str | int | float | bool | None
"""A table cell: numbers are right-aligned when a whole column is numeric."""

_MOST_COMPLEX: Final = 3


class Table(BaseModel):
    """A table: column headings and rows of cells, floats shown with ``precision`` places."""

    columns: Annotated[list[str], Field(min_length=1)]
    rows: list[list[Cell]] = Field(default_factory=list)
    precision: Annotated[int, Field(ge=0, le=12)] = 2

    @model_validator(mode="after")
    def _rows_fit_columns(self) -> Self:
        for number, row in enumerate(self.rows, start=1):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"row {number} has {len(row)} cells for {len(self.columns)} columns"
                )
        return self


class Section(BaseModel):
    """A section of a report: a heading, then text (Markdown), bullet items and a table."""

    heading: str
    text: str = ""
    items: list[str] = Field(default_factory=list)
    table: Table | None = None


class Rendered(BaseModel):
    """A rendered Markdown document."""

    markdown: str


class Hotspot(BaseModel):
    """A function or method complex enough to deserve attention, and where it is."""

    path: str
    name: str
    lineno: int
    complexity: int
    rank: str


class CodeReport(BaseModel):
    """A code report: its Markdown, the numbers of files and functions, and the hotspots."""

    markdown: str
    files: int
    functions: int
    hotspots: list[Hotspot]


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    """Render a title and sections as a Markdown document."""
    lines = [f"# {_line(title)}"]
    for section in sections:
        lines += ["", f"## {_line(section.heading)}"]
        if section.text.strip():
            lines += ["", section.text.strip()]
        if section.items:
            lines += ["", *(f"- {_line(item)}" for item in section.items)]
        if section.table is not None:
            lines += ["", *_table_lines(section.table)]
    return "\n".join(lines) + "\n"


def _line(text: str) -> str:
    return " ".join(text.split())


def _cell(value: Cell, precision: int) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{precision}f}"
    return _line(str(value)).replace("|", "\\|")


def _is_number(value: Cell) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_numeric(table: Table, column: int) -> bool:
    cells = [row[column] for row in table.rows if row[column] is not None]
    return bool(cells) and all(_is_number(cell) for cell in cells)


def _table_lines(table: Table) -> list[str]:
    header = " | ".join(_cell(heading, table.precision) for heading in table.columns)
    rule = " | ".join(
        "---:" if _is_numeric(table, column) else "---" for column in range(len(table.columns))
    )
    body = [
        "| " + " | ".join(_cell(value, table.precision) for value in row) + " |"
        for row in table.rows
    ]
    return [f"| {header} |", f"| {rule} |", *body]


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else text


def _hotspot_table(blocks: list[tuple[str, FunctionMetrics]]) -> Table:
    return Table(
        columns=["Function", "Location", "Complexity", "Rank"],
        rows=[
            [_code(block.name), _code(f"{path}:{block.lineno}"), block.complexity, block.rank]
            for path, block in blocks
        ],
    )


def code_report_sections(
    files: Sequence[FileMetrics], summary: dict[str, Any] | None = None
) -> tuple[list[Section], list[Hotspot]]:
    """Build the sections of a code report and find its hotspots, most complex first."""
    blocks = sorted(
        ((metrics.path, block) for metrics in files for block in metrics.callables()),
        key=lambda pair: (-pair[1].complexity, pair[0], pair[1].lineno),
    )
    hot = [(path, block) for path, block in blocks if is_hotspot(block)]
    by_maintainability = sorted(files, key=lambda m: (m.maintainability_index, m.path))
    rows = _summary_rows(by_maintainability, blocks, len(hot))
    rows += [[_line(str(key)), _summary_value(value)] for key, value in (summary or {}).items()]
    sections = [
        Section(heading="Summary", table=Table(columns=["Metric", "Value"], rows=rows)),
        _files_section(by_maintainability),
        _hotspots_section(hot, blocks),
    ]
    hotspots = [
        Hotspot(path=p, name=b.name, lineno=b.lineno, complexity=b.complexity, rank=b.rank)
        for p, b in hot
    ]
    return sections, hotspots


def _summary_rows(
    by_maintainability: list[FileMetrics],
    blocks: list[tuple[str, FunctionMetrics]],
    hotspots: int,
) -> list[list[Cell]]:
    total = sum(block.complexity for _, block in blocks)
    rows: list[list[Cell]] = [
        ["Files", len(by_maintainability)],
        ["Functions and methods", len(blocks)],
        ["Source lines (SLOC)", sum(metrics.sloc for metrics in by_maintainability)],
        ["Average complexity", f"{total / len(blocks):.2f}" if blocks else "n/a"],
    ]
    if blocks:
        path, block = blocks[0]
        where = f"{_code(block.name)} at {_code(f'{path}:{block.lineno}')}"
        rows.append(["Maximum complexity", f"{block.complexity} ({block.rank}), {where}"])
    if by_maintainability:
        worst = by_maintainability[0]
        index = f"{worst.maintainability_index:.2f} ({worst.mi_rank})"
        rows.append(["Lowest maintainability index", f"{index}, {_code(worst.path)}"])
    rows.append([f"Hotspots (complexity {HOTSPOT_COMPLEXITY} or more)", hotspots])
    return rows


def _files_section(by_maintainability: list[FileMetrics]) -> Section:
    if not by_maintainability:
        return Section(heading="Files", text="No files were analysed.")
    rows: list[list[Cell]] = [
        [
            _code(m.path),
            m.sloc,
            len(m.callables()),
            m.average_complexity,
            m.max_complexity,
            m.maintainability_index,
            m.mi_rank,
        ]
        for m in by_maintainability
    ]
    columns = ["File", "SLOC", "Functions", "Avg CC", "Max CC", "MI", "MI rank"]
    return Section(
        heading="Files",
        text="Sorted by maintainability index, lowest (hardest to maintain) first.",
        table=Table(columns=columns, rows=rows),
    )


def _hotspots_section(
    hot: list[tuple[str, FunctionMetrics]], blocks: list[tuple[str, FunctionMetrics]]
) -> Section:
    if hot:
        return Section(
            heading="Hotspots",
            text=f"Functions and methods of cyclomatic complexity {HOTSPOT_COMPLEXITY} or "
            "more (radon rank C to F), most complex first.",
            table=_hotspot_table(hot),
        )
    if not blocks:
        return Section(heading="Hotspots", text="No functions or methods were found.")
    return Section(
        heading="Hotspots",
        text=f"No function or method has a complexity of {HOTSPOT_COMPLEXITY} or more. "
        "The most complex ones:",
        table=_hotspot_table(blocks[:_MOST_COMPLEX]),
    )


def _summary_value(value: Any) -> Cell:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class ReportAgent(Agent):
    """Renders Markdown reports: a generic document, or a report of code metrics."""

    name = "report"
    description = "Renders Markdown reports, generic or from the code agent's metrics"
    version = "1.0.0"
    tags = ("builtin", "report", "markdown")

    @skill
    async def render(self, title: str, sections: list[Section]) -> Rendered:
        """Render a title and sections (heading, text, items, table) as Markdown."""
        return Rendered(markdown=render_markdown(title, sections))

    @skill
    async def code_report(
        self,
        title: str,
        files: list[FileMetrics | None],
        summary: dict[str, Any] | None = None,
    ) -> CodeReport:
        """Turn the ``code`` agent's results into a Markdown report.

        A summary table (with ``summary``'s keys and values added as rows), the
        files by maintainability, lowest first, and the hotspots with file:line,
        complexity and rank. A null file (one a mapped step could not read) is passed
        over.
        """
        read = [metrics for metrics in files if metrics is not None]
        sections, hotspots = code_report_sections(read, summary)
        return CodeReport(
            markdown=render_markdown(title, sections),
            files=len(read),
            functions=sum(len(metrics.callables()) for metrics in read),
            hotspots=hotspots,
        )
