"""ZooKeeper adapters of the controller (kazoo) and their pure helpers.

Pure (no kazoo, no threads, no clock): ``layout`` (znode paths, settings),
``codec`` (versioned JSON encodings), ``view`` (task records -> ClusterView,
join/leave events). Adapters: ``heartbeat.HeartbeatPublisher`` (tasks),
``watcher.ClusterWatcher`` and ``store.ControllerStore`` (controller).
See docs/znodes.md.
"""
