"""Built-in agents that do real work: deterministic, without network or language models.

``files`` lists, reads and searches files inside an allowed root; ``code`` measures
Python source with radon; ``text`` counts, finds keywords and summarises; ``report``
renders Markdown, from sections or from ``code``'s metrics; ``planner`` splits a task into
steps from the skills the registry knows (a plan fragment). Run one with
``agentbus run agentbus.agents.builtin:FilesAgent``.
"""

from agentbus.agents.builtin._code import (
    HOTSPOT_COMPLEXITY,
    CodeAgent,
    FileMetrics,
    FunctionMetrics,
)
from agentbus.agents.builtin._files import FileEntry, FilesAgent, Match
from agentbus.agents.builtin._paths import ROOT_ENV, FileText, RootGuard
from agentbus.agents.builtin._planner import PlannedStep, PlannerAgent
from agentbus.agents.builtin._report import (
    CodeReport,
    Hotspot,
    Rendered,
    ReportAgent,
    Section,
    Table,
)
from agentbus.agents.builtin._text import Digest, Keyword, Summary, TextAgent, TextStats

__all__ = [
    "HOTSPOT_COMPLEXITY",
    "ROOT_ENV",
    "CodeAgent",
    "CodeReport",
    "Digest",
    "FileEntry",
    "FileMetrics",
    "FileText",
    "FilesAgent",
    "FunctionMetrics",
    "Hotspot",
    "Keyword",
    "Match",
    "PlannedStep",
    "PlannerAgent",
    "Rendered",
    "ReportAgent",
    "RootGuard",
    "Section",
    "Summary",
    "Table",
    "TextAgent",
    "TextStats",
]
