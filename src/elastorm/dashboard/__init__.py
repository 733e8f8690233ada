"""``elastorm dashboard``: a read-only observer of running elastic topologies.

``view`` (pure) turns what was read into the page's model, ``metrics`` renders it
for Prometheus, ``source`` reads ZooKeeper and Nimbus, ``app`` serves it all. See
docs/dashboard.md.
"""
