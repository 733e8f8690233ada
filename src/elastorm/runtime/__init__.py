"""Adapters that run things: the Storm home, ZooKeeper, local mode, the cluster, the CLI."""
