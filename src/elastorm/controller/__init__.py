"""Controller: pure algorithms (allocation, adaptation, recovery, metrics) and adapters.

See docs/controller.md. Algorithm modules never import Storm, ZooKeeper, time or threads.
"""
