"""What a command prints on standard output, written whole.

Under ``PYTHONUNBUFFERED`` (set in the image, and in many CI and container environments)
``sys.stdout`` writes straight to the file descriptor, and a short write loses the rest
of the text: ``TextIOWrapper`` does not write the remainder. After uvloop has run, a write
to a pipe whose reader lags does come back short (65,536 bytes of a 200 KB document,
exit status 0). So a command's output goes through ``write_out``, which writes the rest
until all of it is out, and waits where the descriptor is non-blocking.
"""

from __future__ import annotations

import select
import sys
from typing import Final

__all__ = ["write_out"]

_WAIT: Final = 1.0  # seconds a wait for a non-blocking descriptor lasts before it looks again


def write_out(text: str) -> None:
    """Write ``text`` to standard output, all of it, then flush."""
    stream = sys.stdout
    stream.flush()
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a plain text stream (a test's StringIO): no bytes to count
        stream.write(text)
        stream.flush()
        return
    left = memoryview(text.encode(stream.encoding or "utf-8", errors="replace"))
    while left:
        try:
            written = binary.write(left)
        except BlockingIOError as exc:  # a buffered layer on a non-blocking descriptor
            written = exc.characters_written
        if not written:
            select.select([], [binary], [], _WAIT)
            continue
        left = left[written:]
    binary.flush()
