"""The agent runtime: skills, agent cards, heartbeats and concurrency."""

__all__: list[str] = []
