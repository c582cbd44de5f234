"""The running scheduler over narrow ports (docs/architecture.md).

It knows nothing of Kubernetes or HTTP: the cluster reaches it through
:class:`~coordinator.engine.ports.ClusterWriter` (bind, events, evictions) and a queue feed; the
adapters in :mod:`coordinator.adapters` implement both for the API server and for memory.
"""
