"""Security across hosts: broker permissions generated for a team, and its audit trail."""

from agentbus.security._audit import AuditEntry, AuditPosition, StreamOffset, audit_entries
from agentbus.security._definitions import Grant, definitions, team_grants
from agentbus.security._tls import certificate_user, login_mechanism, tls_context, tls_failure

__all__ = [
    "AuditEntry",
    "AuditPosition",
    "Grant",
    "StreamOffset",
    "audit_entries",
    "certificate_user",
    "definitions",
    "login_mechanism",
    "team_grants",
    "tls_context",
    "tls_failure",
]
