"""The team over the Model Context Protocol, both ways (needs the ``mcp`` extra).

``TeamServer`` serves every live skill on the bus as an MCP tool (stdio or Streamable
HTTP, with bearer ``ApiKeys``: the gateway's keys file serves here too); ``RemoteMcpAgent``
puts an MCP server on the bus as an agent whose skills are its tools.
"""

from agentbus._http import ApiKeys, Callers, PlanWatch
from agentbus.mcp._http import http_app
from agentbus.mcp._link import McpLink, McpTarget
from agentbus.mcp._remote import RemoteMcpAgent
from agentbus.mcp._server import CARD_URI, TeamServer
from agentbus.mcp._settings import McpSettings
from agentbus.mcp._tools import ERROR_META, RUN_PLAN, SEPARATOR, UPDATE_META, tool_name
from agentbus.mcp._workers import serve_workers

__all__ = [
    "CARD_URI",
    "ERROR_META",
    "RUN_PLAN",
    "SEPARATOR",
    "UPDATE_META",
    "ApiKeys",
    "Callers",
    "McpLink",
    "McpSettings",
    "McpTarget",
    "PlanWatch",
    "RemoteMcpAgent",
    "TeamServer",
    "http_app",
    "serve_workers",
    "tool_name",
]
