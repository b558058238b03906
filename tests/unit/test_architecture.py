"""The code's shape is pinned: sizes, complexity, package layering, private imports, loggers.

docs/architecture.md draws the packages and which may import which; these tests fail the
day a change breaks that picture, so the picture and the code stay one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

import pytest
from radon.complexity import cc_visit

SRC: Final = Path(__file__).resolve().parents[2] / "src" / "agentbus"
MAX_LINES: Final = 400
MAX_COMPLEXITY: Final = 12
SIZE_CAPPED: Final = ("bus", "leader")

# Which agentbus package may import which (its public names, or a module named
# ``internal``). The root's own ``_modules`` (_config, _logging, _exceptions, ...) are
# the library's shared internals: every package may use them. ``_http`` is a package of
# its own, in its own layer: what the HTTP faces share, beneath them and above the rest.
_BENEATH_HTTP: Final = frozenset({"envelopes", "security", "bus", "agents", "registry", "leader"})
LAYERS: Final[dict[str, frozenset[str]]] = {
    "envelopes": frozenset(),
    "security": frozenset({"envelopes"}),
    "bus": frozenset({"envelopes", "security"}),
    "agents": frozenset({"envelopes", "security", "bus"}),
    "registry": frozenset({"envelopes", "bus", "agents"}),
    "leader": frozenset({"envelopes", "bus", "agents", "registry"}),
    "_http": _BENEATH_HTTP,
    "testing": _BENEATH_HTTP,
    "gateway": _BENEATH_HTTP | {"_http"},
    "dashboard": frozenset({"envelopes", "bus", "agents", "registry", "leader", "_http"}),
    "mcp": _BENEATH_HTTP | {"_http"},
    "cli": _BENEATH_HTTP | {"_http", "testing", "gateway", "dashboard", "mcp"},
}


def _modules() -> Iterator[tuple[Path, str]]:
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        package = relative.parts[0] if len(relative.parts) > 1 else ""
        yield path, package


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "agentbus" and node.level == 0:
            # ``from agentbus import _http``: a module, like ``import agentbus._http``.
            modules = [a.name for a in node.names if _is_module(SRC / a.name)]
            yield from (f"agentbus.{name}" for name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _is_module(path: Path) -> bool:
    return path.is_dir() or path.with_suffix(".py").is_file()


def _agentbus_imports() -> Iterator[tuple[str, str, list[str]]]:
    for path, package in _modules():
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "agentbus" and len(parts) > 1:
                yield str(path.relative_to(SRC)), package, parts[1:]


def test_no_module_in_bus_or_leader_is_over_400_lines() -> None:
    """The two packages that grew fastest stay in rooms of at most 400 lines."""
    long = {
        str(path.relative_to(SRC)): lines
        for path, package in _modules()
        if package in SIZE_CAPPED
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_block_in_src_is_over_complexity_12() -> None:
    """No function or method has a cyclomatic complexity over 12 (radon's measure)."""
    over = [
        f"{path.relative_to(SRC)}:{block.lineno} {block.fullname} ({block.complexity})"
        for path, _ in _modules()
        for block in cc_visit(path.read_text(encoding="utf-8"))
        if block.complexity > MAX_COMPLEXITY
    ]
    assert over == []


def test_no_package_imports_another_packages_private_module() -> None:
    """Across packages only public names travel (or a module named ``internal``)."""
    private = [
        f"{module}: agentbus.{'.'.join(parts)}"
        for module, package, parts in _agentbus_imports()
        if parts[0] != package
        and len(parts) > 1
        and any(part.startswith("_") for part in parts[1:])
    ]
    assert private == []


def _upward(imports: Iterable[tuple[str, str, list[str]]]) -> list[str]:
    # A root internal (``_config``, ...) is open to all; a package (``_http`` too) only
    # to the packages above it.
    return [
        f"{module}: agentbus.{'.'.join(parts)}"
        for module, package, parts in imports
        if package
        and parts[0] != package
        and (parts[0] in LAYERS or not parts[0].startswith("_"))
        and parts[0] not in LAYERS[package]
    ]


def test_packages_import_only_the_layers_below_them() -> None:
    """Each package imports only the packages docs/architecture.md puts beneath it."""
    assert _upward(_agentbus_imports()) == []


@pytest.mark.parametrize(
    "package", ["envelopes", "security", "bus", "agents", "registry", "leader"]
)
def test_the_layering_check_keeps_the_layers_beneath_http_from_it(package: str) -> None:
    """``_http`` is not a root internal: a package beneath it importing it is caught."""
    imports = [
        (f"{package}/_x.py", package, ["_http"]),
        (f"{package}/_x.py", package, ["_config"]),  # a root internal: open to all
    ]
    assert _upward(imports) == [f"{package}/_x.py: agentbus._http"]


def test_the_http_faces_may_import_the_shared_layer() -> None:
    """The faces and the CLI stand above ``_http``; ``_http`` stands beneath every face."""
    imports = [
        (f"{face}/_x.py", face, ["_http"]) for face in ("gateway", "mcp", "dashboard", "cli")
    ]
    faces = [("_http/_x.py", "_http", [face]) for face in ("gateway", "mcp", "dashboard", "cli")]
    assert _upward(imports) == []
    assert len(_upward(faces)) == 4


def test_every_package_is_placed_in_a_layer() -> None:
    """A new package is placed in the layering before it lands."""
    packages = {path.parent.name for path in SRC.glob("*/__init__.py")}
    assert packages == set(LAYERS)


def test_every_logger_comes_from_the_library_logging_module() -> None:
    """Loggers keep the library's quiet default and its secret scrubbing."""
    direct = [
        str(path.relative_to(SRC))
        for path, _ in _modules()
        if path.name != "_logging.py" and "structlog.get_logger" in path.read_text(encoding="utf-8")
    ]
    assert direct == []


@pytest.mark.parametrize("module", ["agentbus", "agentbus.cli"])
def test_importing_the_library_or_cli_loads_no_in_memory_bus(module: str) -> None:
    """The in-memory bus is loaded for ``--in-memory`` and tests, not by every command."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if 'agentbus.testing' in m))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "[]"
