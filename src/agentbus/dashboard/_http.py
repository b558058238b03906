"""What the dashboard's HTTP modules share: the static folder, the page headers, JSON answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import orjson
from starlette.responses import Response

__all__ = ["HEADERS", "JSON", "STATIC", "error"]

STATIC: Final = Path(__file__).resolve().parent / "static"
HEADERS: Final = {
    # Everything the page needs is served from here: no CDN, no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSON({"error": message}, status_code=status, headers=headers)
