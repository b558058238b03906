"""The built-in agents: files, code, text and report, called directly and over the memory bus."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from agentbus import Agent, AgentBusError, ConfigurationError, InvalidParameters, RemoteError
from agentbus.agents.builtin import (
    ROOT_ENV,
    CodeAgent,
    FileMetrics,
    FilesAgent,
    ReportAgent,
    Section,
    Table,
    TextAgent,
)
from agentbus.agents.builtin._code import analyze_source
from agentbus.agents.builtin._text import split_sentences
from agentbus.testing import MemoryBroker, MemoryBus

SIMPLE = '''"""A module."""


def sign(x):
    # one branch
    if x > 0:
        return 1
    return -1


class Box:
    def get(self):
        return 1

    def put(self, values):
        for _ in values:
            pass
'''

BRANCHY = (
    "def big(x):\n"
    + "".join(f"    if x == {n}:\n        return {n}\n" for n in range(10))
    + "    return -1\n"
)

Start = Callable[..., Awaitable[Agent]]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A tree with text, binary, hidden files and symlinks in and out of the root."""
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / ".hidden").mkdir()
    (root / "a.py").write_text(SIMPLE)
    (root / "docs" / "readme.md").write_text("hello world\nTODO: write more\n")
    (root / "docs" / "notes.txt").write_text("nothing here\nsee todo list\n")
    (root / "bin" / "blob.bin").write_bytes(b"TODO\0\x01\x02 todo")
    (root / ".hidden" / "secret.py").write_text("TODO = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd.txt").write_text("TODO outside\n")
    (root / "leak.txt").symlink_to(outside / "passwd.txt")
    (root / "outdir").symlink_to(outside, target_is_directory=True)
    (root / "inner.txt").symlink_to(root / "docs" / "readme.md")
    return root


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start agents on one in-memory broker; stop them afterwards."""
    broker = MemoryBroker()
    started: list[Agent] = []

    async def start(cls: type[Agent], **kwargs: Any) -> Agent:
        bus = await MemoryBus(broker, agent_id=f"{cls.name}-{len(started)}").open()
        agent = cls(agent_id=bus.agent_id, bus=bus, **kwargs)
        await agent.start()
        started.append(agent)
        return agent

    yield start
    for agent in reversed(started):
        await agent.stop()
        await agent.bus.aclose()


async def ask(agent: Agent, action: str, parameters: dict[str, Any]) -> Any:
    """Request an action of the agent's service from a client on the same broker."""
    bus = agent.bus
    assert isinstance(bus, MemoryBus)
    async with MemoryBus(bus.broker, agent_id="client") as client:
        response = await client.request(agent.name, action, parameters, timeout=5)
    return response.payload.result


# files


async def test_list_files_is_sorted_and_stays_inside_the_root(root: Path) -> None:
    """Files are listed by relative path; hidden files and links out of the root are skipped."""
    agent = FilesAgent(root=root)

    entries = await agent.list_files("**/*")

    paths = [entry.path for entry in entries]
    assert paths == ["a.py", "bin/blob.bin", "docs/notes.txt", "docs/readme.md", "inner.txt"]
    first = entries[0]
    assert first.size == len(SIMPLE.encode())
    assert first.modified.tzinfo is UTC
    assert first.modified.timestamp() == pytest.approx((root / "a.py").stat().st_mtime)


async def test_list_files_honours_pattern_limit_and_hidden(root: Path) -> None:
    """The glob selects, limit cuts, and hidden files come with hidden=True or a dotted pattern."""
    agent = FilesAgent(root=root)

    assert [e.path for e in await agent.list_files()] == ["a.py"]
    assert [e.path for e in await agent.list_files("**/*.txt", limit=1)] == ["docs/notes.txt"]
    with_hidden = await agent.list_files("**/*.py", hidden=True)
    assert [e.path for e in with_hidden] == [".hidden/secret.py", "a.py"]
    assert [e.path for e in await agent.list_files(".hidden/*")] == [".hidden/secret.py"]


async def test_read_file_returns_text_and_size(root: Path) -> None:
    """A file is read as text, by a relative path or an absolute one inside the root."""
    agent = FilesAgent(root=root)

    read = await agent.read_file("docs/readme.md")
    again = await agent.read_file(str(root / "docs" / "readme.md"))

    assert read.model_dump() == {
        "path": "docs/readme.md",
        "size": 29,
        "text": "hello world\nTODO: write more\n",
        "truncated": False,
    }
    assert again == read


async def test_read_file_truncates_without_cutting_a_character(root: Path) -> None:
    """max_bytes cuts the text; a character split by the cut is dropped, bad bytes replaced."""
    (root / "utf.txt").write_bytes("hé!".encode() + b"\xff")
    agent = FilesAgent(root=root)

    cut = await agent.read_file("utf.txt", max_bytes=2)
    whole = await agent.read_file("utf.txt")

    assert (cut.text, cut.size, cut.truncated) == ("h", 5, True)
    assert (whole.text, whole.truncated) == ("hé!\ufffd", False)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("../../etc/passwd", id="dotdot"),
        pytest.param("/etc/passwd", id="absolute-outside"),
        pytest.param("leak.txt", id="symlink-out"),
        pytest.param("outdir/passwd.txt", id="symlinked-dir-out"),
        pytest.param("docs/../../outside/passwd.txt", id="dotdot-inside-path"),
    ],
)
async def test_read_file_refuses_paths_out_of_the_root(root: Path, path: str) -> None:
    """Paths leading out of the root, by .., absolutely or through a symlink: unauthorized."""
    agent = FilesAgent(root=root)

    with pytest.raises(AgentBusError) as caught:
        await agent.read_file(path)

    assert caught.value.code == "unauthorized"
    assert "outside the allowed root" in caught.value.message


@pytest.mark.parametrize("path", ["../../etc/passwd", "leak.txt"])
async def test_files_refuses_escapes_over_the_bus(root: Path, start: Start, path: str) -> None:
    """Over the bus, an escaping path comes back as a RemoteError with code unauthorized."""
    agent = await start(FilesAgent, root=root)

    with pytest.raises(RemoteError) as caught:
        await ask(agent, "read_file", {"path": path})

    assert caught.value.code == "unauthorized"


async def test_files_answers_over_the_bus(root: Path, start: Start) -> None:
    """Results travel as JSON: a list of entries, a file's text, search matches."""
    agent = await start(FilesAgent, root=root)

    listed = await ask(agent, "list_files", {"pattern": "docs/*"})
    read = await ask(agent, "read_file", {"path": "docs/notes.txt"})
    found = await ask(agent, "search", {"pattern": "hello"})

    assert [entry["path"] for entry in listed] == ["docs/notes.txt", "docs/readme.md"]
    assert listed[0]["modified"].endswith("Z")
    assert read["text"] == "nothing here\nsee todo list\n"
    assert found == [
        {"path": "docs/readme.md", "line": 1, "text": "hello world"},
        {"path": "inner.txt", "line": 1, "text": "hello world"},
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [("missing.txt", "no such file"), ("docs", "not a regular file"), ("a\0b", "cannot resolve")],
)
async def test_read_file_rejects_what_is_not_a_file(root: Path, path: str, message: str) -> None:
    """A missing file, a directory or an unusable path is invalid_parameters."""
    agent = FilesAgent(root=root)

    with pytest.raises(InvalidParameters, match=message) as caught:
        await agent.read_file(path)

    assert caught.value.code == "invalid_parameters"


@pytest.mark.parametrize("pattern", ["../*", "/etc/*", "docs/../../*"])
async def test_globs_reaching_out_are_unauthorized(root: Path, pattern: str) -> None:
    """A glob that is absolute or climbs with .. is refused."""
    agent = FilesAgent(root=root)

    with pytest.raises(AgentBusError) as caught:
        await agent.list_files(pattern)

    assert caught.value.code == "unauthorized"


async def test_search_finds_lines_and_skips_binary_and_outside_files(root: Path) -> None:
    """Matches come in path order with line numbers; binary files and escapes are skipped."""
    agent = FilesAgent(root=root)

    matches = await agent.search("(?i)todo")

    assert [(m.path, m.line, m.text) for m in matches] == [
        ("docs/notes.txt", 2, "see todo list"),
        ("docs/readme.md", 2, "TODO: write more"),
        ("inner.txt", 2, "TODO: write more"),
    ]
    assert [m.path for m in await agent.search("TODO", max_matches=1)] == ["docs/readme.md"]
    assert [m.path for m in await agent.search("TODO", glob="*.py", hidden=True)] == []
    assert [m.path for m in await agent.search("TODO", glob="**/*.py", hidden=True)] == [
        ".hidden/secret.py"
    ]


async def test_search_rejects_an_invalid_regex(root: Path, start: Start) -> None:
    """An invalid regular expression is invalid_parameters, directly and over the bus."""
    agent = await start(FilesAgent, root=root)

    with pytest.raises(InvalidParameters, match="invalid regular expression"):
        await FilesAgent(root=root).search("(unclosed")
    with pytest.raises(RemoteError) as caught:
        await ask(agent, "search", {"pattern": "[a-"})

    assert caught.value.code == "invalid_parameters"


def test_root_defaults_to_the_setting_and_must_exist(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGENTBUS_FILES_ROOT is the default root; a missing root is a configuration error."""
    monkeypatch.setenv(ROOT_ENV, str(root / "docs" / ".."))
    assert FilesAgent().root == root.resolve()
    monkeypatch.delenv(ROOT_ENV)
    assert FilesAgent().root == Path.cwd().resolve()
    with pytest.raises(ConfigurationError, match="does not exist"):
        FilesAgent(root=root / "nowhere")


# code


async def test_analyze_measures_lines_and_complexity() -> None:
    """One if is complexity 2; methods are qualified; the averages cover functions and methods."""
    metrics = await CodeAgent().analyze(SIMPLE, path="simple.py")

    blocks = {block.name: block for block in metrics.functions}
    assert [block.name for block in metrics.functions] == ["sign", "Box", "Box.get", "Box.put"]
    assert (blocks["sign"].kind, blocks["sign"].complexity, blocks["sign"].rank) == (
        "function",
        2,
        "A",
    )
    assert (blocks["Box.put"].kind, blocks["Box.put"].complexity) == ("method", 2)
    assert (blocks["Box.get"].lineno, blocks["Box.get"].endline) == (12, 13)
    assert blocks["Box"].kind == "class"
    assert metrics.path == "simple.py"
    assert metrics.loc == len(SIMPLE.splitlines()) == 17
    assert (metrics.comments, metrics.blank) == (1, 5)
    assert metrics.average_complexity == round((2 + 1 + 2) / 3, 2)
    assert metrics.max_complexity == 2
    assert metrics.hotspots == []
    assert 0 < metrics.maintainability_index <= 100
    assert metrics.mi_rank == "A"


async def test_analyze_flags_hotspots_and_closures() -> None:
    """Ten ifs make complexity 11, a rank C hotspot; a closure is a block of its own."""
    closure = "def outer():\n    def inner(y):\n        return y or 0\n    return inner\n"
    source = f"{BRANCHY}\n\n{closure}"

    metrics = await CodeAgent().analyze(source)

    blocks = {block.name: block for block in metrics.functions}
    assert (blocks["big"].complexity, blocks["big"].rank) == (11, "C")
    assert (blocks["outer.inner"].kind, blocks["outer.inner"].complexity) == ("function", 2)
    assert metrics.hotspots == ["big"]
    assert metrics.max_complexity == 11
    simple = await CodeAgent().analyze(SIMPLE)
    assert metrics.maintainability_index < simple.maintainability_index


async def test_analyze_names_the_line_of_a_syntax_error(start: Start) -> None:
    """Invalid Python is invalid_parameters naming the line, directly and over the bus."""
    broken = "x = 1\ny = 2\ndef f(:\n    pass\n"
    agent = await start(CodeAgent)

    with pytest.raises(InvalidParameters, match="line 3") as caught:
        await CodeAgent().analyze(broken, path="broken.py")
    with pytest.raises(RemoteError) as remote:
        await ask(agent, "analyze", {"source": broken})

    assert caught.value.details["line"] == 3
    assert "broken.py" in caught.value.message
    assert remote.value.code == "invalid_parameters"
    assert "line 3" in remote.value.message


async def test_analyze_file_reads_with_the_files_rules(root: Path) -> None:
    """analyze_file reads under its root, and refuses to leave it."""
    agent = CodeAgent(root=root)

    metrics = await agent.analyze_file("a.py")

    assert metrics == analyze_source(SIMPLE, "a.py")
    with pytest.raises(AgentBusError) as caught:
        await agent.analyze_file("leak.txt")
    assert caught.value.code == "unauthorized"


# text

STORY = "The cat sat on the mat. The cat ran!\n\nDogs bark."


async def test_stats_counts_words_sentences_and_paragraphs() -> None:
    """Counts and averages of a known text."""
    stats = await TextAgent().stats(STORY)

    lengths = [3, 3, 3, 2, 3, 3, 3, 3, 3, 4, 4]
    assert stats.model_dump() == {
        "characters": len(STORY),
        "words": 11,
        "unique_words": 8,
        "sentences": 3,
        "paragraphs": 2,
        "average_word_length": round(sum(lengths) / 11, 2),
        "average_sentence_length": round(11 / 3, 2),
        "lexical_diversity": round(8 / 11, 4),
    }
    empty = await TextAgent().stats("  \n")
    assert (empty.words, empty.sentences, empty.lexical_diversity) == (0, 0, 0.0)


def test_sentences_survive_decimals_and_abbreviations() -> None:
    """3.14 and e.g. do not end a sentence; quotes stay with theirs; paragraphs split."""
    text = 'Pi is 3.14, e.g. roughly. He said "stop!" Then\nleft.\n\nNew one'

    assert split_sentences(text) == [
        "Pi is 3.14, e.g. roughly.",
        'He said "stop!"',
        "Then left.",
        "New one",
    ]


async def test_keywords_rank_by_frequency_then_alphabetically() -> None:
    """Stop words, numbers and single letters are left out; ties are alphabetical."""
    text = (
        "Agents send messages. Agents receive messages. "
        "Agents share a bus; the bus routes messages in 3 ways, x."
    )

    keywords = await TextAgent().keywords(text, top=4)

    # agents 3, messages 3, bus 2, then receive/routes/send/share/ways 1: 13 words in all.
    assert [(k.word, k.count, k.score) for k in keywords] == [
        ("agents", 3, round(3 / 13, 4)),
        ("messages", 3, round(3 / 13, 4)),
        ("bus", 2, round(2 / 13, 4)),
        ("receive", 1, round(1 / 13, 4)),
    ]


async def test_summarize_picks_the_densest_sentences_in_order() -> None:
    """Sentences score their words' frequency over their length; the top N keep text order."""
    text = (
        "Rabbits eat carrots. The weather was cold. "
        "Rabbits love carrots and rabbits dig. Nothing happened."
    )
    agent = TextAgent()

    # rabbits 3, carrots 2, others 1; scores 6/3/3, 2/3/4, 10/3/6, 2/3/2 -> 0, 2, 3, 1.
    two = await agent.summarize(text, sentences=2)
    one = await agent.summarize(text, sentences=1)
    three = await agent.summarize(text, sentences=3)

    assert two.model_dump() == {
        "summary": "Rabbits eat carrots. Rabbits love carrots and rabbits dig.",
        "sentences": [0, 2],
        "total_sentences": 4,
    }
    assert one.sentences == [0]
    assert three.sentences == [0, 2, 3]
    assert (await agent.summarize(text, sentences=9)).sentences == [0, 1, 2, 3]


# report


async def test_code_report_has_the_right_numbers() -> None:
    """The summary, the files by maintainability and the hotspots come from the metrics."""
    simple = analyze_source(SIMPLE, "pkg/simple.py")
    branchy = analyze_source(BRANCHY, "pkg/big.py")

    report = await ReportAgent().code_report(
        "Code health", [simple, branchy], summary={"commit": "abc123"}
    )

    md = report.markdown
    assert md.startswith("# Code health\n")
    assert (report.files, report.functions) == (2, 4)
    assert "| Files | 2 |" in md
    assert "| Functions and methods | 4 |" in md
    assert f"| Average complexity | {(2 + 1 + 2 + 11) / 4:.2f} |" in md
    assert "| Maximum complexity | 11 (C), `big` at `pkg/big.py:1` |" in md
    worst = min(simple, branchy, key=lambda m: m.maintainability_index)
    assert f"| Lowest maintainability index | {worst.maintainability_index:.2f}" in md
    assert "| Hotspots (complexity 11 or more) | 1 |" in md
    assert "| commit | abc123 |" in md
    assert md.index("| `pkg/big.py` |") < md.index("| `pkg/simple.py` |")
    assert "| `big` | `pkg/big.py:1` | 11 | C |" in md
    assert [(h.path, h.name, h.lineno, h.complexity, h.rank) for h in report.hotspots] == [
        ("pkg/big.py", "big", 1, 11, "C")
    ]


async def test_code_report_without_hotspots_lists_the_most_complex() -> None:
    """With no hotspot, the section says so and shows the most complex functions."""
    report = await ReportAgent().code_report("Small", [analyze_source(SIMPLE, "s.py")])
    empty = await ReportAgent().code_report("Nothing", [])

    assert report.hotspots == []
    assert "No function or method has a complexity of 11 or more" in report.markdown
    assert "| `sign` | `s.py:4` | 2 | A |" in report.markdown
    assert "| Files | 0 |" in empty.markdown
    assert "No files were analysed." in empty.markdown


async def test_pipeline_over_the_bus_list_analyze_report(root: Path, start: Start) -> None:
    """files -> code -> report over the bus: JSON results feed the next skill unchanged."""
    (root / "big.py").write_text(BRANCHY)
    files = await start(FilesAgent, root=root)
    code = await start(CodeAgent, root=root)
    report = await start(ReportAgent)

    listed = await ask(files, "list_files", {"pattern": "*.py"})
    metrics = [await ask(code, "analyze_file", {"path": entry["path"]}) for entry in listed]
    result = await ask(report, "code_report", {"title": "Root", "files": metrics})

    assert [m["path"] for m in metrics] == ["a.py", "big.py"]
    assert FileMetrics.model_validate(metrics[1]).hotspots == ["big"]
    assert (result["files"], result["functions"]) == (2, 4)
    assert result["hotspots"][0]["name"] == "big"
    assert "`big.py:1`" in result["markdown"]


async def test_render_builds_markdown_from_sections() -> None:
    """Headings, text, items and tables; numeric columns right-aligned, pipes escaped."""
    sections = [
        Section(heading="Intro", text="Some *text*.", items=["one", "two"]),
        Section(
            heading="Numbers",
            table=Table(columns=["name", "value"], rows=[["a|b", 1.5], ["c", None], ["d", 2]]),
        ),
    ]

    rendered = await ReportAgent().render("Title", sections)

    assert rendered.markdown == (
        "# Title\n\n## Intro\n\nSome *text*.\n\n- one\n- two\n\n## Numbers\n\n"
        "| name | value |\n| --- | ---: |\n| a\\|b | 1.50 |\n| c |  |\n| d | 2 |\n"
    )


def test_render_refuses_rows_that_do_not_fit_the_columns() -> None:
    """A row with the wrong number of cells is invalid_parameters when the request is bound."""
    parameters = {
        "title": "t",
        "sections": [{"heading": "h", "table": {"columns": ["a", "b"], "rows": [[1]]}}],
    }

    with pytest.raises(InvalidParameters, match="row 1 has 1 cells for 2 columns"):
        ReportAgent.skills["render"].bind(parameters)


# the package


def test_builtin_agents_have_cards_and_a_sorted_api() -> None:
    """Each agent offers its skills under its service name; __all__ is sorted and resolves."""
    module = importlib.import_module("agentbus.agents.builtin")
    services = {cls.name: sorted(cls.skills) for cls in (FilesAgent, CodeAgent, TextAgent)}
    services[ReportAgent.name] = sorted(ReportAgent.skills)

    assert services == {
        "files": ["list_files", "read_file", "search"],
        "code": ["analyze", "analyze_file"],
        "text": ["digest", "keywords", "stats", "summarize"],
        "report": ["code_report", "render"],
    }
    names = list(module.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert all(hasattr(module, name) for name in names)


def test_cards_describe_parameters_and_results(root: Path) -> None:
    """Every skill's parameters and result have a JSON Schema, bounds included."""
    agents = [FilesAgent(root=root), CodeAgent(root=root), TextAgent(), ReportAgent()]

    cards = {agent.name: {s.name: s for s in agent.card.skills} for agent in agents}

    list_files = cards["files"]["list_files"]
    assert list_files.parameters["properties"]["limit"]["minimum"] == 1
    assert list_files.result["type"] == "array"
    assert "maintainability_index" in str(cards["code"]["analyze"].result)
    assert (
        "functions"
        in cards["report"]["code_report"].parameters["$defs"]["FileMetrics"]["properties"]
    )


async def test_text_digest_reads_several_texts_as_one() -> None:
    """digest joins texts as paragraphs: their summary, keywords and counts."""
    agent = TextAgent(agent_id="text-digest")
    texts = ["Bees make honey. Bees dance.", "", "Honey is sweet."]

    digest = await agent.digest(texts, sentences=1, top=2)

    assert digest.texts == 2
    assert digest.words == 8
    assert digest.sentences == 3
    assert digest.keywords == "bees, honey"
    assert digest.summary in {"Bees make honey.", "Bees dance.", "Honey is sweet."}


async def test_code_metrics_carry_the_module_docstring() -> None:
    """analyze returns the module's docstring, for a summary of the code base."""
    agent = CodeAgent(agent_id="code-doc")
    metrics = await agent.analyze('"""Counts bees."""\n\nx = 1\n')
    assert metrics.docstring == "Counts bees."
    assert (await agent.analyze("x = 1\n")).docstring == ""
