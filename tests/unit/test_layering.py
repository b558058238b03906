"""Security sits beneath the bus: the bus calls it, it never imports the bus."""

from __future__ import annotations

import ast
from pathlib import Path

import agentbus

SOURCE = Path(agentbus.__file__).parent


def _imports(path: Path) -> set[str]:
    """The absolute modules ``path`` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _beneath_security(module: str) -> bool:
    # agentbus's internal modules (agentbus._config, ...), the envelopes, security itself.
    parts = module.split(".")
    return len(parts) > 1 and (parts[1].startswith("_") or parts[1] in {"envelopes", "security"})


def test_security_imports_only_what_lies_beneath_it() -> None:
    """agentbus.security uses the envelopes and agentbus's internal modules, nothing above."""
    for path in sorted((SOURCE / "security").glob("*.py")):
        ours = {m for m in _imports(path) if m == "agentbus" or m.startswith("agentbus.")}
        above = sorted(m for m in ours if not _beneath_security(m))
        assert not above, f"{path.name} imports {above}"


def test_no_other_package_imports_a_private_module_of_security() -> None:
    """Other packages use agentbus.security's public names, never its _modules."""
    for path in sorted(SOURCE.rglob("*.py")):
        if path.parent.name == "security":
            continue
        private = {m for m in _imports(path) if m.startswith("agentbus.security._")}
        assert not private, f"{path.relative_to(SOURCE)} imports {sorted(private)}"
