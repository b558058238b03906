"""The code blocks of the README and docs/ (the site's pages), each with what vouches for it.

Every fenced block a user might paste is preceded by one HTML comment:

- ``<!-- doc-test: NAME -->``: tests/docs/test_docs.py runs it (its runner NAME); a block
  shown on two pages (the README and the site) carries the same name on both, and the
  copies must be the same text;
- ``<!-- tested-by: PATH -->``: the test module (or script) at PATH, from the repository
  root, runs it;
- ``<!-- illustrative: REASON -->``: not runnable as shown, and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/**/*.md", "deploy/README.md")

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
_MARK = re.compile(r"<!--\s*(?P<kind>doc-test|tested-by|illustrative):\s*(?P<value>.+?)\s*-->")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block and the marker above it (kind and value; None: none)."""

    path: Path
    line: int
    lang: str
    text: str
    kind: str | None
    value: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    """The Markdown files whose blocks are accounted for."""
    found: list[Path] = []
    for pattern in DOCUMENTS:
        found += sorted(ROOT.glob(pattern))
    return found


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        mark = _marker_above(lines, index)
        indent = len(opening["indent"])
        body = "\n".join(line[indent:] for line in lines[index + 1 : end])
        found.append(
            Block(
                path,
                index + 1,
                opening["lang"],
                body + "\n",
                mark[0] if mark else None,
                mark[1] if mark else None,
            )
        )
        index = end + 1
    return found


def _marker_above(lines: list[str], index: int) -> tuple[str, str] | None:
    above = index - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    if above < 0:
        return None
    found = _MARK.search(lines[above])
    return (found["kind"], found["value"]) if found else None


def all_blocks() -> list[Block]:
    """Every block of every document."""
    return [block for path in documents() for block in blocks(path)]


def named(name: str) -> Block:
    """The block marked ``doc-test: name`` (the first, where the same text is on two pages)."""
    found = [b for b in all_blocks() if b.kind == "doc-test" and b.value == name]
    assert found, f"no block is marked doc-test: {name}"
    copies = {b.text for b in found}
    assert len(copies) == 1, f"the blocks marked {name} differ: {[b.where for b in found]}"
    return found[0]
