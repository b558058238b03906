"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["agents_table", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows as left-aligned columns under a header line."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines)


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def agents_table(agents: Sequence[dict[str, Any]]) -> str:
    """Render the registry's ``list_agents`` result as a table."""
    if not agents:
        return "no agents known to the registry"
    rows = [
        (
            agent["agent_id"],
            agent["service"],
            agent["status"],
            f"{agent['in_flight']}/{agent['capacity']}",
            ",".join(agent["skills"]) or "-",
            _age(float(agent["age"])),
        )
        for agent in agents
    ]
    return table(("ID", "SERVICE", "STATUS", "LOAD", "SKILLS", "LAST SEEN"), rows)
