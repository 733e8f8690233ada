"""elastorm core: key groups, routing, state, checkpoints and migration protocols.

Sans-IO: nothing here imports streamparse, pystorm, kazoo, pyspark, socket,
threading or time. Adapters in ``bolts``, ``spouts``, ``controller`` and ``jobs``
drive it.
"""
