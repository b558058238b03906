"""The documentation site builds strict, its reference covers the public API, its links hold.

``mkdocs build --strict`` fails on any warning: a link to a page or an anchor that is not
there, a page left out of the nav, a docstring mkdocstrings cannot read. On top of that:
every name of every public package's ``__all__`` is an object of the API reference (read
from the inventory the build writes), and every external link is well formed. External links
are not fetched: CI has no internet, and a site's answer is not the docs' to vouch for.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from doc_blocks import ROOT

pytestmark = pytest.mark.docs

sys.path.insert(0, str(ROOT / "docs" / "hooks"))
from reference import public_packages  # noqa: E402  (the hook's own list of packages)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strict into a temporary folder."""
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_site_builds_strict_with_the_pages_of_the_nav(site: Path) -> None:
    """The strict build ran through, and wrote the home page and each reference page."""
    for page in (
        "index.html",
        "getting-started/index.html",
        "reference/cli/index.html",
        "reference/settings/index.html",
        "reference/metrics/index.html",
        "reference/error-codes/index.html",
        "benchmarks/index.html",
    ):
        assert (site / page).is_file(), page
    for package in public_packages():
        assert (site / "reference" / "api" / package / "index.html").is_file(), package


def test_the_api_reference_has_every_name_of_every_public_all(site: Path) -> None:
    """Each ``package.name`` of each public ``__all__`` is an object of the site's inventory."""
    from mkdocstrings import Inventory

    with (site / "objects.inv").open("rb") as inventory:
        documented = set(Inventory.parse_sphinx(inventory))
    missing = [
        f"{package}.{name}"
        for package in public_packages()
        for name in importlib.import_module(package).__all__
        if f"{package}.{name}" not in documented
    ]
    assert not missing, f"names of __all__ missing from the API reference: {missing}"


def test_the_public_packages_are_the_ones_the_exported_members_test_walks() -> None:
    """The reference's packages are the public ones test_exported_members.py pins."""
    assert {"agentbus", "agentbus.bus", "agentbus.leader", "agentbus.testing.chaos"} <= set(
        public_packages()
    )
    assert not [p for p in public_packages() if any(part.startswith("_") for part in p.split("."))]


def test_the_cli_settings_metrics_and_error_codes_pages_come_from_the_code(site: Path) -> None:
    """Every command, setting, metric family and error code is on its page."""
    import click

    from agentbus import ErrorCode, Metrics, Settings
    from agentbus.cli import cli

    pages = {
        name: (site / "reference" / name / "index.html").read_text(encoding="utf-8")
        for name in ("cli", "settings", "metrics", "error-codes")
    }
    context = click.Context(cli)
    for command in cli.list_commands(context):
        assert f"agentbus {command}" in pages["cli"], command
        # A subcommand option's environment variable is listed beside the settings.
        sub = cli.get_command(context, command)
        assert sub is not None
        for param in sub.params:
            if isinstance(param.envvar, str):
                assert param.envvar in pages["settings"], (command, param.envvar)
    for field in Settings.model_fields:
        assert f"AGENTBUS_{field.upper()}" in pages["settings"], field
    for family in Metrics().registry.collect():
        assert family.name in pages["metrics"], family.name
    for code in ErrorCode:
        assert f"<code>{code.value}</code>" in pages["error-codes"], code


class _Links(HTMLParser):
    """The ``href`` of every ``<a>`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found += [value for name, value in attrs if name == "href" and value]


def _external_links(site: Path) -> Iterator[tuple[str, str]]:
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for href in parser.found:
            if re.match(r"^[a-z][a-z0-9+.-]*:", href):
                yield str(page.relative_to(site)), href


def test_external_links_are_well_formed_https(site: Path) -> None:
    """Every link out of the site is https:// to a named host (not fetched: no internet)."""
    bad = [
        f"{page}: {href}"
        for page, href in _external_links(site)
        if not href.startswith("mailto:")
        and (urlsplit(href).scheme != "https" or "." not in (urlsplit(href).hostname or ""))
    ]
    assert not bad, f"external links that are not https to a named host: {bad}"
