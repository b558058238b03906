"""The MCP SDK's own server with one ``echo`` tool and no bus: the floor an MCP call stands on.

``python bench/_bench_mcp_echo.py`` serves stdio; ``--http PORT`` Streamable HTTP.
"""

from __future__ import annotations

import sys

from mcp.server import MCPServer

server = MCPServer("echo")


@server.tool(name="echo__echo")
def echo(n: int) -> int:
    """Return ``n`` (named as agentbus mcp names the Echo agent's skill)."""
    return n


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
