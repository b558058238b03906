"""The code's shape is pinned: sizes, complexity, package layering, private imports, loggers.

docs/architecture.md draws the packages and which may import which, the bus's rooms, and
no circle of imports; these tests fail the day a change breaks that picture, so the
picture and the code stay one.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

import pytest
from radon.complexity import cc_visit

SRC: Final = Path(__file__).resolve().parents[2] / "src" / "agentbus"
MAX_LINES: Final = 400
MAX_COMPLEXITY: Final = 12
SIZE_CAPPED: Final = ("bus", "leader")
RABBITMQ_CLIENT: Final = frozenset({"aio_pika", "aiormq", "pamqp"})

# The bus's rooms (docs/architecture.md, "Inside the bus") and which of the others each
# may import. ``bus`` is the shared core and the request semantics: the same for every
# broker, it reaches RabbitMQ only through the broker's seam (``BrokerHooks``), so the
# in-memory bus runs it too. Its door (``bus/__init__.py``) re-exports from every room.
BUS_ROOMS: Final[dict[str, frozenset[str]]] = {
    "bus._stores": frozenset(),
    "bus": frozenset({"bus._stores"}),
    "bus._rabbitmq": frozenset({"bus", "bus._stores"}),
}

# Which agentbus package may import which (its public names, or a module named
# ``internal``). The root's own ``_modules`` (_config, _logging, _exceptions, ...) are
# the library's shared internals: every package may use them. ``_http`` is a package of
# its own, in its own layer: what the HTTP faces share, beneath them and above the rest.
# ``sync`` (the blocking client) is a face of the library for code without asyncio: it
# translates calls from threads into the bus's and the leader's, and nothing imports it
# but the root's door (``agentbus/__init__.py``).
_BENEATH_HTTP: Final = frozenset({"envelopes", "security", "bus", "agents", "registry", "leader"})
LAYERS: Final[dict[str, frozenset[str]]] = {
    "envelopes": frozenset(),
    "security": frozenset({"envelopes"}),
    "definitions": frozenset({"envelopes"}),
    "bus": frozenset({"envelopes", "security"}),
    "agents": frozenset({"envelopes", "security", "bus"}),
    "registry": frozenset({"envelopes", "bus", "agents"}),
    "leader": frozenset({"envelopes", "bus", "agents", "registry"}),
    "_http": _BENEATH_HTTP,
    "sync": frozenset({"envelopes", "bus", "leader"}),
    "testing": _BENEATH_HTTP,
    "gateway": _BENEATH_HTTP | {"_http"},
    "dashboard": frozenset({"envelopes", "bus", "agents", "registry", "leader", "_http"}),
    "mcp": _BENEATH_HTTP | {"_http"},
    "cli": _BENEATH_HTTP | {"_http", "definitions", "testing", "gateway", "dashboard", "mcp"},
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Final = {_module_name(path): path for path, _ in _modules()}
DOORS: Final = ("__init__.py", "internal.py")


def _resolved(name: str) -> str:
    # ``agentbus.bus.Bus`` -> ``agentbus.bus``: the longest prefix that is a module.
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _every_import(path: Path) -> Iterator[tuple[str, int]]:
    """Each module ``path`` imports (an agentbus one by the module it names), and where: at
    the top, under ``TYPE_CHECKING`` or inside a function alike, since each is a dependency
    a reader has to follow."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from agentbus import _workers`` imports the module ``agentbus._workers``.
            names = [
                full if (full := f"{node.module}.{alias.name}") in MODULES else node.module
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            ours = name == "agentbus" or name.startswith("agentbus.")
            yield (_resolved(name) if ours else name), node.lineno


def _room(module: str) -> str:
    """The node of ``module`` in the graph of rooms.

    Each of the root's shared internals (``agentbus._config``) is a node. A package (and
    each package in it, such as ``bus._rabbitmq``) is two: its doors (``__init__`` and
    ``internal``, which other packages import) and its room (``agentbus.bus.*``: the
    modules behind them). A door imports its own room and the rooms inside it; were door
    and room one node, ``bus`` re-exporting ``Bus`` from ``bus._rabbitmq``, which builds
    on ``bus``'s ``BaseBus``, would read as a circle that no import follows.
    """
    path = MODULES[module]
    if path.name in DOORS or path.parent == SRC:
        return module
    return f"{_module_name(path.parent)}.*"


def _import_graph(node_of: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """Edges between the nodes ``node_of`` puts modules in, each with where it is imported."""
    graph: dict[str, dict[str, str]] = {}
    for module, path in sorted(MODULES.items()):
        source = node_of(module)
        edges = graph.setdefault(source, {})
        for imported, line in _every_import(path):
            if imported not in MODULES:
                continue
            target = node_of(imported)
            if target != source:
                edges.setdefault(target, f"{path.relative_to(SRC)}:{line}")
    return graph


def _a_cycle(graph: dict[str, dict[str, str]]) -> list[str]:
    """One circle in ``graph``, an edge a line (``a -> b (where)``); empty when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            circle = [*path[path.index(node) :], node]
            return [f"{a} -> {b} ({graph[a][b]})" for a, b in itertools.pairwise(circle)]
        if node in done:
            return []
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if found := visit(target):
                return found
        path.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        if found := visit(node):
            return found
    return []


def _bus_room(module: str) -> str:
    return _module_name(MODULES[module].parent).removeprefix("agentbus.")


def test_no_module_in_bus_or_leader_is_over_400_lines() -> None:
    """The two packages that grew fastest (the rooms inside them too) keep to 400 lines."""
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


@pytest.mark.parametrize("package", ["security", "definitions"])
def test_enforcement_and_the_generators_use_no_amqp_client(package: str) -> None:
    """``security`` and ``definitions`` sit below the transport: no aio-pika, no aiormq."""
    clients = {"aio_pika", "aiormq", "pamqp"}
    found = [
        f"{path.relative_to(SRC)}: {name}"
        for path, owner in _modules()
        if owner == package
        for name in _imports(path)
        if name.split(".")[0] in clients
    ]
    assert found == []


def test_every_package_is_placed_in_a_layer() -> None:
    """A new package is placed in the layering before it lands."""
    packages = {path.parent.name for path in SRC.glob("*/__init__.py")}
    assert packages == set(LAYERS)


def test_bus_rooms_import_only_the_rooms_beneath_them() -> None:
    """Stores beneath the core, the core beneath RabbitMQ: no room of the bus reaches up."""
    upward = [
        f"{module}: {imported}"
        for module, path in MODULES.items()
        if module.startswith("agentbus.bus.") and path.name != "__init__.py"
        for imported, _ in _every_import(path)
        if imported.startswith("agentbus.bus.")
        and (room := _bus_room(imported)) != _bus_room(module)
        and room not in BUS_ROOMS[_bus_room(module)]
    ]
    assert upward == []


def test_only_the_rabbitmq_room_of_the_bus_imports_the_rabbitmq_client() -> None:
    """The core of the bus and its stores hold nothing of aio-pika, aiormq or pamqp."""
    client = [
        f"{module}: {imported}"
        for module, path in MODULES.items()
        if module.startswith("agentbus.bus") and _bus_room(module) != "bus._rabbitmq"
        for imported, _ in _every_import(path)
        if imported.partition(".")[0] in RABBITMQ_CLIENT
    ]
    assert client == []


def test_every_room_of_the_bus_is_placed() -> None:
    """A new room in the bus is placed among the others before it lands."""
    rooms = {_bus_room(module) for module in MODULES if module.startswith("agentbus.bus")}
    assert rooms == set(BUS_ROOMS)


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


def test_no_import_circle_between_rooms() -> None:
    """No two rooms need each other, type-only and function-local imports included.

    A circle means neither side can be read, tested or moved without the other; the
    layering above would hide it when it runs through the root's internals (an
    ``_exceptions`` that names an envelope type while ``envelopes`` raises its errors).
    """
    cycle = _a_cycle(_import_graph(_room))
    assert cycle == [], "a circle of imports:\n" + "\n".join(cycle)


def test_no_import_circle_between_modules() -> None:
    """Inside a room too, no two modules need each other, type-only imports included.

    Two modules that need each other are one concept split in two files, or one of them
    holds something that belongs beneath both.
    """
    cycle = _a_cycle(_import_graph(lambda module: module))
    assert cycle == [], "a circle of imports:\n" + "\n".join(cycle)
