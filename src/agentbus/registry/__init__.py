"""The registry agent: liveness from heartbeats, discovery, online/offline events."""

__all__: list[str] = []
