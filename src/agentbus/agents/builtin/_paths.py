"""The allowed root of the file-reading agents: every path resolved and kept inside it."""

from __future__ import annotations

import codecs
import os
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from pydantic import BaseModel

from agentbus._exceptions import AgentBusError, ConfigurationError, InvalidParameters
from agentbus.envelopes import ErrorCode

__all__ = ["ROOT_ENV", "FileText", "RootGuard"]

ROOT_ENV: Final = "AGENTBUS_FILES_ROOT"
"""The setting naming the default root of ``files`` and ``code`` (else the working directory)."""

# Opening the resolved path without following a final symlink closes the window in
# which a checked file could be swapped for a link out of the root.
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)


class FileText(BaseModel):
    """The text of a file, cut at ``max_bytes`` when ``truncated``; ``size`` is the whole file's."""

    path: str
    size: int
    text: str
    truncated: bool


class RootGuard:
    """Keep file access inside one directory, the root, resolved once.

    Paths are taken relative to the root (absolute paths are allowed when they
    lie inside it); each is resolved, symlinks included, and refused with the
    ``unauthorized`` error code when it ends up outside. Glob results that
    escape the root are skipped.

    Args:
        root: The allowed directory; default ``AGENTBUS_FILES_ROOT``, else the
            current working directory.

    Raises:
        ConfigurationError: the root is not an existing directory.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        chosen = root if root is not None else os.environ.get(ROOT_ENV) or Path.cwd()
        try:
            resolved = Path(chosen).expanduser().resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise ConfigurationError(f"the files root {str(chosen)!r} does not exist") from exc
        if not resolved.is_dir():
            raise ConfigurationError(f"the files root {str(resolved)!r} is not a directory")
        self.root = resolved

    def __repr__(self) -> str:
        return f"<RootGuard root={str(self.root)!r}>"

    def contains(self, path: Path) -> bool:
        """Tell whether a resolved path is the root or lies under it."""
        return path.is_relative_to(self.root)

    def relative(self, path: Path) -> str:
        """Return a path under the root as a POSIX path relative to the root."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, path: str) -> Path:
        """Resolve a requested path, which may not exist, and keep it inside the root.

        Raises:
            AgentBusError: ``unauthorized`` when the path leads out of the root.
            InvalidParameters: the path cannot be resolved (a NUL byte, a symlink loop).
        """
        try:
            resolved = (self.root / path).resolve(strict=False)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InvalidParameters(f"cannot resolve path {path!r}: {exc}") from exc
        if not self.contains(resolved):
            raise AgentBusError(
                f"path {path!r} is outside the allowed root",
                code=ErrorCode.UNAUTHORIZED,
                details={"path": path},
            )
        return resolved

    def file(self, path: str) -> Path:
        """Resolve a requested path to a regular file inside the root.

        Raises:
            AgentBusError: ``unauthorized`` when the path leads out of the root.
            InvalidParameters: no such file, or not a regular file.
        """
        resolved = self.resolve(path)
        if not resolved.exists():
            raise InvalidParameters(f"no such file: {path!r}", details={"path": path})
        if not resolved.is_file():
            raise InvalidParameters(f"not a regular file: {path!r}", details={"path": path})
        return resolved

    def glob(self, pattern: str, *, hidden: bool = False) -> list[tuple[str, Path]]:
        """Return the regular files a glob pattern matches under the root, sorted.

        Each is a pair of its path relative to the root, as found, and its resolved
        path. Matches resolving outside the root are skipped, and so are hidden
        files and directories (a name starting with ``.``) unless ``hidden`` is
        true or the pattern names one.

        Raises:
            AgentBusError: ``unauthorized`` for an absolute pattern or one with ``..``.
            InvalidParameters: the pattern is empty or malformed.
        """
        parts = PurePosixPath(pattern).parts
        if PurePosixPath(pattern).is_absolute() or ".." in parts:
            raise AgentBusError(
                f"glob {pattern!r} reaches outside the allowed root",
                code=ErrorCode.UNAUTHORIZED,
                details={"pattern": pattern},
            )
        hidden = hidden or any(part.startswith(".") for part in parts)
        try:
            candidates = list(self.root.glob(pattern))
        except (ValueError, NotImplementedError) as exc:
            raise InvalidParameters(f"invalid glob {pattern!r}: {exc}") from exc
        found = [
            (candidate.relative_to(self.root).as_posix(), resolved)
            for candidate in candidates
            if (resolved := self._accept(candidate, hidden)) is not None
        ]
        found.sort(key=lambda pair: pair[0])
        return found

    def _accept(self, candidate: Path, hidden: bool) -> Path | None:
        relative = candidate.relative_to(self.root)
        if not hidden and any(part.startswith(".") for part in relative.parts):
            return None
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            return None  # a dangling link or a loop
        return resolved if self.contains(resolved) and resolved.is_file() else None

    def open(self, resolved: Path) -> BinaryIO:
        """Open a resolved file for reading bytes, refusing a symlink put in its place.

        Raises:
            OSError: the file cannot be opened (``ELOOP`` for a symlink).
        """
        return os.fdopen(os.open(resolved, _OPEN_FLAGS), "rb")

    def read_text(self, path: str, max_bytes: int) -> FileText:
        """Read at most ``max_bytes`` of a file inside the root as UTF-8 text.

        Undecodable bytes become U+FFFD; a character cut by the limit is dropped.

        Raises:
            AgentBusError: ``unauthorized`` outside the root, ``processing_failed``
                when the file cannot be read.
            InvalidParameters: no such regular file.
        """
        resolved = self.file(path)
        try:
            with self.open(resolved) as handle:
                size = os.fstat(handle.fileno()).st_size
                data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise AgentBusError(f"cannot read {path!r}: {exc.strerror}") from exc
        truncated = len(data) > max_bytes
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data[:max_bytes], final=not truncated)
        return FileText(
            path=self.relative(resolved),
            size=max(size, len(data)),
            text=text,
            truncated=truncated,
        )
