"""What the repository keeps small: no large binary in git or in the sdist; bench/ in its cap.

A wheel, a browser build or a tool's download committed by mistake stays in the history for
good; these tests fail before it lands. A file over the cap that belongs here goes in
``ALLOWED`` with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.required import missing

ROOT = Path(__file__).resolve().parents[2]
CAP = 512 * 1024  # bytes, any one file
ALLOWED: dict[str, str] = {}  # path -> why it may be larger than CAP
BENCH_CAP = 3000  # lines of bench/**/*.py: the benchmarks' budget
BENCH_NOW = 2999  # where bench/ stands: it may shrink, never grow


def _tracked() -> list[str]:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing tracked to look at")
    done = subprocess.run(
        [git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    return [name for name in done.stdout.decode().split("\0") if name]


def test_no_tracked_file_is_over_the_cap() -> None:
    """Every file git tracks is at most 512 KiB, or allowed by name with a reason."""
    tracked = _tracked()
    sizes = {name: (ROOT / name).stat().st_size for name in tracked if (ROOT / name).is_file()}

    over = {name: size for name, size in sizes.items() if size > CAP and name not in ALLOWED}
    assert not over, f"files over {CAP} bytes (allow one in ALLOWED with a reason): {over}"
    assert "pyproject.toml" in sizes  # the listing is the repository's


def test_test_modules_have_unique_names() -> None:
    """No two test modules share a file name: the tiers have no ``__init__.py``, so pytest
    imports each module by its bare name, and a second one fails the whole run's collection."""
    seen: dict[str, list[str]] = {}
    for module in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(module.name, []).append(str(module.relative_to(ROOT)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, f"rename one of each pair: {twice}"
    assert "test_repository_limits.py" in seen  # the walk found this module


def test_the_sdist_holds_the_sources_and_nothing_large(tmp_path: Path) -> None:
    """The sdist hatchling builds: the package, tests, docs; no file over the cap, no
    wheel, no node_modules, no caches."""
    try:
        from hatchling.builders.sdist import SdistBuilder
    except ImportError:
        missing("hatchling (the build backend) is needed: pip install -e '.[test]'")
    (built,) = SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    with tarfile.open(built) as sdist:
        members = {m.name.split("/", 1)[1]: m.size for m in sdist.getmembers() if m.isfile()}

    over = {name: size for name, size in members.items() if size > CAP and name not in ALLOWED}
    assert not over, f"sdist files over {CAP} bytes: {over}"
    assert {"pyproject.toml", "README.md", "src/agentbus/__init__.py"} <= members.keys()
    assert any(name.startswith("tests/unit/") for name in members)
    assert any(name.startswith("docs/") for name in members)
    unwanted = ("node_modules/", "__pycache__/", ".cache/", ".venv/", "bench/", "fuzz/")
    assert not [n for n in members if n.endswith(".whl") or any(u in n for u in unwanted)]


def _bench_lines() -> int:
    return sum(len(path.read_text().splitlines()) for path in (ROOT / "bench").rglob("*.py"))


def test_bench_does_not_grow() -> None:
    """bench/ is no larger than it stands now (lower BENCH_NOW as it shrinks)."""
    assert _bench_lines() <= BENCH_NOW


def test_bench_is_within_its_cap() -> None:
    """bench/**/*.py holds at most 3,000 lines."""
    assert _bench_lines() <= BENCH_CAP
