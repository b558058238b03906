"""The operator's artefacts: what a team's and a site's broker must hold, generated.

Nothing here runs at a bus's side: ``agentbus definitions`` and ``agentbus federation``
(and the deploy scripts and tests behind them) call it to write documents an operator
applies. It owns:

- a team's grants and broker definitions (``team_grants``, ``Grant``, ``definitions``):
  the topology the bus declares, and one broker user per service allowed only its part of
  the wire contract, the requests to peer sites' outboxes and the links' users included;
- the federation of a site with its peers (``federation_definitions``, and the links
  alone, ``link_definitions``): outboxes, links, beacons;
- the same as Kubernetes resources of the RabbitMQ messaging topology operator: a team's
  users and permissions (``topology_resources``) with their credentials' Secrets
  (``credential_secrets``, named by ``secret_name``), and a site's links
  (``federation_resources``) with their upstream URIs' Secrets (``uri_secrets``).

It imports only the envelopes and agentbus's internal modules (settings, exceptions, the
topology's names): no aio-pika, no bus. What the bus enforces at run time lives in
``agentbus.security``.
"""

from agentbus.definitions._federation import federation_definitions, link_definitions
from agentbus.definitions._k8s import credential_secrets, secret_name, topology_resources
from agentbus.definitions._k8s_federation import federation_resources, uri_secrets
from agentbus.definitions._team import Grant, definitions, team_grants

__all__ = [
    "Grant",
    "credential_secrets",
    "definitions",
    "federation_definitions",
    "federation_resources",
    "link_definitions",
    "secret_name",
    "team_grants",
    "topology_resources",
    "uri_secrets",
]
