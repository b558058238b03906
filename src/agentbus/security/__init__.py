"""Security across hosts: broker permissions generated for a team, and its audit trail."""

from agentbus.security._audit import AuditEntry, AuditPosition, StreamOffset, audit_entries
from agentbus.security._definitions import Grant, definitions, team_grants

__all__ = [
    "AuditEntry",
    "AuditPosition",
    "Grant",
    "StreamOffset",
    "audit_entries",
    "definitions",
    "team_grants",
]
