"""The ``files`` agent: list, read and search files inside an allowed root."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, Field

from agentbus._exceptions import InvalidParameters
from agentbus.agents._agent import Agent
from agentbus.agents._skills import skill
from agentbus.agents.builtin._paths import FileText, RootGuard

__all__ = ["FileEntry", "FilesAgent", "Match"]

_BINARY_SNIFF: Final = 8192
_MAX_LINE: Final = 1000  # a minified file's one line must not fill a response


class FileEntry(BaseModel):
    """A file under the root: its POSIX path relative to the root, size and mtime (UTC)."""

    path: str
    size: int
    modified: datetime


class Match(BaseModel):
    """A line matching a search: its file, 1-based line number and text."""

    path: str
    line: int
    text: str


class FilesAgent(Agent):
    """Lists, reads and searches files, never outside its root.

    Every requested path, and every file a glob finds, is resolved (symlinks
    included); a path leading out of the root is refused with ``unauthorized``,
    and glob matches leading out of it are skipped.

    Args:
        root: The allowed directory; default ``AGENTBUS_FILES_ROOT``, else the
            current working directory. Resolved once, here.
        **kwargs: Passed to ``Agent``.
    """

    name = "files"
    description = "Lists, reads and searches files inside an allowed root directory"
    version = "1.0.0"
    tags = ("builtin", "files")

    def __init__(self, *, root: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = RootGuard(root)

    @property
    def root(self) -> Path:
        """The allowed directory, resolved."""
        return self.guard.root

    @skill
    async def list_files(
        self,
        pattern: str = "**/*.py",
        limit: Annotated[int, Field(ge=1)] = 10_000,
        hidden: bool = False,
    ) -> list[FileEntry]:
        """List the files matching a glob pattern under the root, sorted by path.

        At most ``limit`` files, the first by path. Hidden files and directories
        are left out unless ``hidden`` is true or the pattern names them.
        """
        return await asyncio.to_thread(self._list_files, pattern, limit, hidden)

    @skill
    async def read_file(
        self, path: str, max_bytes: Annotated[int, Field(ge=0)] = 1_000_000
    ) -> FileText:
        """Read a file under the root as UTF-8 text, at most ``max_bytes`` of it.

        Bytes that are not UTF-8 become U+FFFD.
        """
        return await asyncio.to_thread(self.guard.read_text, path, max_bytes)

    @skill
    async def search(
        self,
        pattern: str,
        glob: str = "**/*",
        max_matches: Annotated[int, Field(ge=1)] = 1000,
        hidden: bool = False,
    ) -> list[Match]:
        """Find the lines matching a regular expression in the files a glob selects.

        Files are searched in path order; binary files (a NUL byte in the first
        8 KiB) are skipped; at most ``max_matches`` lines are returned, each cut
        to 1000 characters.
        """
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidParameters(
                f"invalid regular expression {pattern!r}: {exc}",
                details={"pattern": pattern, "position": exc.pos},
            ) from exc
        return await asyncio.to_thread(self._search, regex, glob, max_matches, hidden)

    def _list_files(self, pattern: str, limit: int, hidden: bool) -> list[FileEntry]:
        entries: list[FileEntry] = []
        for relative, resolved in self.guard.glob(pattern, hidden=hidden):
            if len(entries) >= limit:
                break
            try:
                stat = resolved.stat()
            except OSError:
                continue  # removed since the glob saw it
            modified = datetime.fromtimestamp(stat.st_mtime, tz=UTC)
            entries.append(FileEntry(path=relative, size=stat.st_size, modified=modified))
        return entries

    def _search(
        self, regex: re.Pattern[str], glob: str, max_matches: int, hidden: bool
    ) -> list[Match]:
        matches: list[Match] = []
        for relative, resolved in self.guard.glob(glob, hidden=hidden):
            try:
                with self.guard.open(resolved) as handle:
                    if b"\0" in handle.read(_BINARY_SNIFF):
                        continue
                    handle.seek(0)
                    for number, raw in enumerate(handle, start=1):
                        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                        if regex.search(line):
                            matches.append(Match(path=relative, line=number, text=line[:_MAX_LINE]))
                            if len(matches) >= max_matches:
                                return matches
            except OSError:
                continue  # unreadable files are not an error of the search
        return matches
