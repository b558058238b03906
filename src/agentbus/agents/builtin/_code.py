"""The ``code`` agent: metrics of Python source with radon."""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel

try:
    from radon.complexity import cc_rank
    from radon.metrics import mi_rank, mi_visit
    from radon.raw import analyze as raw_metrics
    from radon.visitors import ComplexityVisitor
except ImportError as exc:  # an optional dependency: only the demo's agents need it
    raise ImportError(
        "the built-in agents need radon: pip install 'agentbus[demo]'", name=exc.name
    ) from exc

from agentbus._exceptions import InvalidParameters
from agentbus.agents._agent import Agent
from agentbus.agents._skills import skill
from agentbus.agents.builtin._paths import RootGuard

__all__ = ["HOTSPOT_COMPLEXITY", "CodeAgent", "FileMetrics", "FunctionMetrics", "is_hotspot"]

HOTSPOT_COMPLEXITY: Final = 11
"""The cyclomatic complexity from which a function is a hotspot: radon rank C and worse."""

_MAX_SOURCE_BYTES: Final = 5_000_000


class FunctionMetrics(BaseModel):
    """One block of a module: a function, a method or a class, with its complexity.

    Names are qualified (``Class.method``, ``outer.inner``). A class's
    complexity is radon's: its methods' average, plus one when it has several.
    """

    name: str
    kind: Literal["function", "method", "class"]
    lineno: int
    endline: int
    complexity: int
    rank: str


class FileMetrics(BaseModel):
    """The metrics of one Python module.

    ``loc``, ``lloc``, ``sloc``, ``comments`` and ``blank`` are radon's raw line
    counts. The average and maximum complexity are over functions and methods
    (classes would count their methods twice). ``hotspots`` names the functions
    and methods of complexity 11 or more (radon rank C to F), most complex first:
    a threshold rather than a top three, so simple code reports none.
    """

    path: str
    loc: int
    lloc: int
    sloc: int
    comments: int
    blank: int
    functions: list[FunctionMetrics]
    average_complexity: float
    max_complexity: int
    maintainability_index: float
    mi_rank: str
    hotspots: list[str]
    docstring: str = ""

    def callables(self) -> list[FunctionMetrics]:
        """Return the functions and methods, without the classes."""
        return [block for block in self.functions if block.kind != "class"]


def is_hotspot(block: FunctionMetrics) -> bool:
    """Tell whether a function or method is complex enough to be a hotspot."""
    return block.kind != "class" and block.complexity >= HOTSPOT_COMPLEXITY


# CPython 3.11 counts the AST constructor's recursion in state all threads share: two
# parses at once in worker threads can fail with "SystemError: AST constructor recursion
# depth mismatch" (seen in the demo). Parsing holds the GIL anyway: one at a time.
_PARSING: Final = threading.Lock()


def analyze_source(source: str, path: str = "<source>") -> FileMetrics:
    """Measure Python source: raw line counts, complexity per block, maintainability.

    Raises:
        InvalidParameters: the source is not valid Python; names the line.
    """
    with _PARSING:
        return _analyze(source, path)


def _analyze(source: str, path: str) -> FileMetrics:
    try:
        tree = ast.parse(source, filename=path)
        raw = raw_metrics(source)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes
        raise _invalid_source(exc, path) from exc
    visitor = ComplexityVisitor.from_ast(tree)
    blocks = sorted(
        (*_walk(visitor.functions, ""), *_walk(visitor.classes, "")),
        key=lambda block: (block.lineno, block.name),
    )
    callables = [block for block in blocks if block.kind != "class"]
    complexities = [block.complexity for block in callables]
    hotspots = sorted(
        (block for block in callables if is_hotspot(block)),
        key=lambda block: (-block.complexity, block.lineno),
    )
    index = float(mi_visit(source, multi=True))
    return FileMetrics(
        path=path,
        loc=raw.loc,
        lloc=raw.lloc,
        sloc=raw.sloc,
        comments=raw.comments,
        blank=raw.blank,
        functions=blocks,
        average_complexity=round(sum(complexities) / len(complexities), 2) if callables else 0.0,
        max_complexity=max(complexities, default=0),
        maintainability_index=round(index, 2),
        mi_rank=str(mi_rank(index)),
        hotspots=[block.name for block in hotspots],
        docstring=_module_docstring(source),
    )


def _module_docstring(source: str) -> str:
    # radon parsed the source already, so this cannot fail on syntax.
    return ast.get_docstring(ast.parse(source)) or ""


def _invalid_source(exc: SyntaxError | ValueError, path: str) -> InvalidParameters:
    line = getattr(exc, "lineno", None)
    where = f" at line {line}" if line else ""
    reason = getattr(exc, "msg", None) or str(exc)
    return InvalidParameters(
        f"{path} is not valid Python: syntax error{where}: {reason}",
        details={"path": path, "line": line, "offset": getattr(exc, "offset", None)},
    )


def _walk(radon_blocks: list[Any], prefix: str) -> Iterator[FunctionMetrics]:
    # radon keeps methods, closures and inner classes inside their parents, and does
    # not add a closure's complexity to its function: each is a block of its own.
    for block in radon_blocks:
        name = f"{prefix}{block.name}"
        is_class = hasattr(block, "methods")
        kind: Literal["function", "method", "class"] = (
            "class" if is_class else "method" if block.is_method else "function"
        )
        complexity = int(block.complexity)
        yield FunctionMetrics(
            name=name,
            kind=kind,
            lineno=block.lineno,
            endline=block.endline,
            complexity=complexity,
            rank=str(cc_rank(complexity)),
        )
        if is_class:
            yield from _walk(block.methods, f"{name}.")
            yield from _walk(block.inner_classes, f"{name}.")
        else:
            yield from _walk(block.closures, f"{name}.")


class CodeAgent(Agent):
    """Measures Python source with radon: line counts, complexity, maintainability.

    Args:
        root: The directory ``analyze_file`` may read, with the ``files`` agent's
            rules; default ``AGENTBUS_FILES_ROOT``, else the working directory.
        **kwargs: Passed to ``Agent``.
    """

    name = "code"
    description = "Python source metrics: line counts, cyclomatic complexity, maintainability"
    version = "1.0.0"
    tags = ("builtin", "code", "python")

    def __init__(self, *, root: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = RootGuard(root)

    @skill
    async def analyze(self, source: str, path: str = "<source>") -> FileMetrics:
        """Measure Python source: lines, per-function complexity and rank, maintainability.

        ``path`` only labels the result.
        """
        return await asyncio.to_thread(analyze_source, source, path)

    @skill
    async def analyze_file(self, path: str) -> FileMetrics:
        """Measure a Python file under the root, read as the ``files`` agent reads it."""
        return await asyncio.to_thread(self._analyze_file, path)

    def _analyze_file(self, path: str) -> FileMetrics:
        read = self.guard.read_text(path, _MAX_SOURCE_BYTES)
        if read.truncated:
            raise InvalidParameters(
                f"{read.path} is larger than {_MAX_SOURCE_BYTES} bytes",
                details={"path": read.path, "size": read.size},
            )
        return analyze_source(read.text, read.path)
