"""De-duplication stores: the memory of requests already served, and their answers.

The seam (``DedupStore``, ``SharedDedupStore``) and the process's window, the SQLite file
a host's instances share, and Redis, shared across hosts. Beneath the rest of the bus:
the stores take envelopes and the root's internals, nothing of the bus or its broker.
"""
