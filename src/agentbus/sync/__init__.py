"""agentbus from code that does not use asyncio: a blocking client, safe in every thread.

``SyncBus`` (opened by ``connect_sync``) keeps one event loop in a daemon thread of its
own, with one bus on it; each call, from any thread, runs there and waits::

    bus = agentbus.connect_sync()          # once per process: a Django or Flask app's
    reply = bus.request("greeter", "greet", {"who": "ann"}, timeout=10)
    task = bus.submit_task("writer", "outline", {"topic": "bees"})   # returns at once
    state = bus.plan_status(task.id)       # later, from any process

docs/guides/sync-client.md is the guide.
"""

from agentbus.sync._client import SyncBus, connect_sync
from agentbus.sync._pending import PendingPlan

__all__ = ["PendingPlan", "SyncBus", "connect_sync"]
