"""Security across hosts: broker permissions generated for a team (and its audit trail)."""

from agentbus.security._definitions import Grant, definitions, team_grants

__all__ = ["Grant", "definitions", "team_grants"]
