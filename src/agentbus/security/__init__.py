"""Security across hosts: broker permissions generated for a team, and its audit trail."""

from agentbus.security._admission import (
    Admissible,
    Refusal,
    connection_user,
    identity_refusal,
    publisher_user_id,
    refusal,
    sent_by,
    verifies_sender,
)
from agentbus.security._audit import (
    AUDIT_FORMAT,
    AuditEntry,
    AuditPosition,
    StreamOffset,
    audit_entries,
    audit_record,
    envelope_fields,
    raw_fields,
)
from agentbus.security._audit_trail import AuditSink, AuditStream, AuditTrail
from agentbus.security._definitions import Grant, definitions, team_grants
from agentbus.security._rates import SenderRates
from agentbus.security._tls import login_mechanism, tls_context, tls_failure

__all__ = [
    "AUDIT_FORMAT",
    "Admissible",
    "AuditEntry",
    "AuditPosition",
    "AuditSink",
    "AuditStream",
    "AuditTrail",
    "Grant",
    "Refusal",
    "SenderRates",
    "StreamOffset",
    "audit_entries",
    "audit_record",
    "connection_user",
    "definitions",
    "envelope_fields",
    "identity_refusal",
    "login_mechanism",
    "publisher_user_id",
    "raw_fields",
    "refusal",
    "sent_by",
    "team_grants",
    "tls_context",
    "tls_failure",
    "verifies_sender",
]
