"""MkDocs hook: the reference pages that are made from the code at each build.

Nothing on these pages is copied by hand, so none of it can drift from the code:

- ``reference/api/<package>.md``: one page per public package (every package no part of
  whose dotted name starts with ``_``, as ``tests/unit/test_exported_members.py`` walks
  them), each a mkdocstrings block listing exactly the names of its ``__all__``, and each
  listed in the nav under "Python API";
- ``reference/settings.md``: the fields of each settings class (``Settings`` and the faces'
  ``*Settings``), their environment variables, defaults, bounds and attribute docstrings;
- ``reference/metrics.md``: the Prometheus families a ``Metrics`` registers, read from a
  fresh one (and from a scrape of its bus collector);
- ``reference/error-codes.md``: ``ErrorCode``'s members, with the exceptions that carry each;
- ``deploy.md``: ``deploy/README.md``, which lives beside what it describes;
- ``index.md``: the README, the site's home page as it is the repository's.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

SRC = Path(__file__).resolve().parents[2] / "src"

SETTINGS = (
    ("agentbus", "Settings", "The bus: every agent, client and command."),
    ("agentbus.gateway", "GatewaySettings", "`agentbus gateway` (the `a2a` extra)."),
    ("agentbus.mcp", "McpSettings", "`agentbus mcp` (the `mcp` extra)."),
    ("agentbus.dashboard", "DashboardSettings", "`agentbus dashboard` (the `dashboard` extra)."),
)
"""The settings classes the settings page lists, where each is imported from."""


def public_packages() -> list[str]:
    """Every package users may import: no part of its dotted name starts with ``_``."""
    import agentbus

    found = ["agentbus"]
    for info in pkgutil.walk_packages(agentbus.__path__, "agentbus."):
        if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """List every public package's page under the nav's "Python API" (a new one shows up)."""
    pages = [{name: f"reference/api/{name}.md"} for name in public_packages()]
    found = _replace_section(config.nav or [], "Python API", pages)
    assert found, 'mkdocs.yml has no "Python API" entry in its nav'
    return config


def _replace_section(nav: list[Any], title: str, pages: list[dict[str, str]]) -> bool:
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        for key, value in entry.items():
            if key == title:
                entry[key] = pages
                return True
            if isinstance(value, list) and _replace_section(value, title, pages):
                return True
    return False


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference pages to the site's files."""
    loaded = griffe.load("agentbus", search_paths=[str(SRC)], resolve_aliases=False)
    assert isinstance(loaded, griffe.Module)
    pages = {f"reference/api/{name}.md": api_page(name) for name in public_packages()}
    pages["reference/settings.md"] = settings_page(loaded)
    pages["reference/metrics.md"] = metrics_page()
    pages["reference/error-codes.md"] = error_codes_page(loaded)
    pages["deploy.md"] = deploy_page()
    pages["index.md"] = home_page()
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


def api_page(package: str) -> str:
    """A package's page: its docstring, then each name of its ``__all__``, in that order."""
    module = importlib.import_module(package)
    names: list[str] = list(module.__all__)
    members = "\n".join(f"        - {name}" for name in names)
    return (
        f"# `{package}`\n\n"
        f"`{package}.__all__`: {len(names)} names, each below.\n\n"
        f"::: {package}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_root_toc_entry: false\n"
        "      members_order: __all__\n"
        "      members:\n"
        f"{members}\n"
    )


def settings_page(loaded: griffe.Module) -> str:
    """Every settings field: environment variable, type, default, bounds and meaning."""
    lines = [
        "# Settings",
        "",
        "Every setting reads an environment variable; a command-line option, where there is",
        "one, wins over it. Made at each build from the settings classes' fields and their",
        "docstrings.",
        "",
    ]
    for module_name, class_name, used_by in SETTINGS:
        cls = getattr(importlib.import_module(module_name), class_name)
        assert issubclass(cls, BaseSettings)
        prefix = str(cls.model_config.get("env_prefix", ""))
        documented = _class_of(loaded, cls)
        lines += [
            f"## `{class_name}`",
            "",
            f"{used_by} `{module_name}.{class_name}`, from `{prefix}<NAME>`.",
            "",
            "| variable | type | default | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for name, field in cls.model_fields.items():
            member = documented.members.get(name)
            doc = member.docstring.value if member is not None and member.docstring else ""
            meaning = " ".join(part for part in (_markdown(doc), _bounds(field)) if part)
            lines.append(
                f"| `{prefix}{name.upper()}` | `{_type(field)}` | {_default(field)} | {meaning} |"
            )
        lines.append("")
    return "\n".join(lines + _other_variables(lines))


def _other_variables(written: list[str]) -> list[str]:
    # What the CLI's options and a few modules read beside the settings classes: each option
    # whose environment variable is not a setting above, and the modules' own variables.
    import click

    from agentbus._loop import LOOP_ENV
    from agentbus.agents.builtin._paths import ROOT_ENV
    from agentbus.cli import cli

    known = set(re.findall(r"`(AGENTBUS_[A-Z0-9_]+)`", "\n".join(written)))
    rows: dict[str, str] = {
        LOOP_ENV: "Every `agentbus` process: the event loop, `auto` (uvloop where the `fast` "
        "extra installed it, else asyncio's), `uvloop` or `asyncio`.",
        ROOT_ENV: "The built-in `files` and `code` agents: the folder they may read (default: "
        "the working directory).",
    }

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            found = set(re.findall(r"AGENTBUS_[A-Z0-9_]+", getattr(param, "help", None) or ""))
            if isinstance(param.envvar, str):
                found.add(param.envvar)
            for variable in sorted(found - known - rows.keys()):
                option = "/".join(param.opts)
                rows[variable] = f"`{path} {option}`: {_markdown(getattr(param, 'help', ''))}"
        if isinstance(command, click.Group):  # the root group's commands load lazily
            context = click.Context(command)
            for name in sorted(command.list_commands(context)):
                sub = command.get_command(context, name)
                if sub is not None:
                    walk(sub, f"{path} {name}")

    walk(cli, "agentbus")
    return [
        "## Read beside the settings classes",
        "",
        "Variables of the command line's options (an option wins over its variable) and of",
        "single modules: made from the CLI's options and the modules' constants.",
        "",
        "| variable | read by, and meaning |",
        "| --- | --- |",
        *(f"| `{variable}` | {text} |" for variable, text in sorted(rows.items())),
        "",
    ]


def metrics_page() -> str:
    """The families a ``Metrics`` registers: name as scraped, type, labels, help."""
    from agentbus import Metrics

    metrics = Metrics()
    rows = []
    for family in _families(metrics):
        rows.append(
            f"| `{family['name']}` | {family['type']} | "
            f"{', '.join(f'`{label}`' for label in family['labels']) or 'none'} | "
            f"{_markdown(family['help'])} |"
        )
    return "\n".join(
        [
            "# Metrics",
            "",
            "Every agent process serves these with `--metrics-port N` (`Metrics.serve`), on the",
            "`CollectorRegistry` a `Metrics` is given. The bus's counters (`agent_id` label)",
            "are read at scrape time, so they cost nothing on the hot path; the registry's and",
            "the leader's families are set by those agents. Made at each build from a fresh",
            "`agentbus.Metrics`.",
            "",
            "| family | type | labels | help |",
            "| --- | --- | --- | --- |",
            *sorted(rows),
            "",
        ]
    )


def error_codes_page(loaded: griffe.Module) -> str:
    """``ErrorCode``'s members, each with the exceptions that carry it and what they mean."""
    import agentbus
    from agentbus.envelopes import PROTOCOL_VERSION, ErrorCode

    errors = [
        value
        for name in agentbus.__all__
        if isinstance(value := getattr(agentbus, name), type) and issubclass(value, Exception)
    ]
    documented = _class_of(loaded, ErrorCode)
    lines = [
        "# Error codes",
        "",
        f"The error codes of wire contract {PROTOCOL_VERSION} (`agentbus.ErrorCode`): an error",
        "envelope's `payload.code` (see [the wire contract](../wire.md#error-codes)). A skill",
        "answers with one by raising the exception that carries it, or any",
        "`AgentBusError(message, code=...)`; a caller gets `RemoteError` with `.code`, or the",
        "exception named here where the bus raises it itself. Made at each build from",
        "`ErrorCode` and the exception tree.",
        "",
        "| code | raised as | meaning |",
        "| --- | --- | --- |",
    ]
    for code in ErrorCode:
        carriers = [error for error in errors if error.__dict__.get("code") == code.value]
        member = documented.members.get(code.name)
        meanings = [member.docstring.value] if member is not None and member.docstring else []
        meanings += [_summary(error) for error in carriers]
        raised = ", ".join(f"[`{e.__name__}`][agentbus.{e.__name__}]" for e in carriers)
        lines.append(f"| `{code.value}` | {raised or '-'} | {_markdown(' '.join(meanings))} |")
    lines.append("")
    return "\n".join(lines)


def _families(metrics: Any) -> Iterator[dict[str, Any]]:
    # The Counter/Gauge/Histogram attributes, then the families the bus collector builds at
    # a scrape (one bus attached, so that each of those has a labelled sample).
    from prometheus_client.metrics import MetricWrapperBase

    declared = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            [family] = value.describe()
            declared.add(family.name)
            # The label names a wrapper was declared with: prometheus-client keeps them in
            # ``_labelnames`` only (a docs build fails here if that ever changes).
            yield _family(family, list(value._labelnames))
    metrics.attach(_OneOfEach())
    for family in metrics.registry.collect():
        if family.name not in declared:
            yield _family(family, list(family.samples[0].labels))


def _family(family: Any, labels: list[str]) -> dict[str, Any]:
    suffix = "_total" if family.type == "counter" else ""
    return {
        "name": family.name + suffix,
        "type": family.type,
        "labels": labels,
        "help": family.documentation,
    }


class _OneStats:
    """Bus statistics with one entry in every mapping: each family gets a labelled sample."""

    published_by_type = {"request": 1}
    consumed_by = {("request", "served"): 1}
    errors_sent = {"timeout": 1}
    errors_received = {"timeout": 1}
    refused_by = {"routing_key": 1}
    node = "amqp://localhost:5672/"

    def __getattr__(self, name: str) -> int:
        return 0  # the plain counters: dead_lettered, late_replies, ...


class _OneOfEach:
    """A bus, as the metrics collector reads one."""

    agent_id = "agent"
    stats = _OneStats()
    in_flight = 0


def _class_of(loaded: griffe.Module, cls: type) -> griffe.Class:
    # The class as griffe read it from the source: it has the attribute docstrings.
    path = f"{cls.__module__}.{cls.__qualname__}".removeprefix("agentbus.")
    found = loaded[path]
    assert isinstance(found, griffe.Class)
    return found


def _summary(obj: object) -> str:
    return (obj.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def _markdown(text: str) -> str:
    # Docstrings write code as ``x``; in a table cell a newline or a bar would end the row.
    return " ".join(text.replace("``", "`").replace("|", "\\|").split())


def _type(field: FieldInfo) -> str:
    return _annotation(field.annotation)


def _annotation(annotation: Any) -> str:
    # ``int``, ``str | None``, ``Literal['classic', 'quorum'] | None``: as the source writes it.
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(_annotation(arg) for arg in args)
    if typing.get_origin(annotation) is typing.Literal:
        return f"Literal[{', '.join(repr(arg) for arg in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return "none" if value is None else f"`{value}`"


def _bounds(field: FieldInfo) -> str:
    found = []
    for item in field.metadata:
        for key, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(item, key, None) is not None:
                found.append(f"{sign} {getattr(item, key)}")
        if getattr(item, "pattern", None):
            found.append(f"matches `{item.pattern}`")
    return f"({', '.join(found)})" if found else ""


def deploy_page() -> str:
    """deploy/README.md as a page of the site: its links into docs/ made the site's."""
    text = (SRC.parent / "deploy" / "README.md").read_text(encoding="utf-8")
    return text.replace("](../docs/", "](")


def home_page() -> str:
    """README.md as the site's home: its links into the repository made the site's."""
    text = (SRC.parent / "README.md").read_text(encoding="utf-8")
    for repository, site in (
        ("](docs/", "]("),
        ("](deploy/README.md)", "](deploy.md)"),
        ("](CHANGELOG.md)", "](changelog.md)"),
        ("](LICENSE)", "](license.md)"),
    ):
        text = text.replace(repository, site)
    return text
