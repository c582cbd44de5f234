"""NeuroNetes' workload layer: ``AgentPool`` and ``ToolBinding`` (``neuronetes.io/v1alpha1``).

The pure half decides (no event loop, HTTP or Kubernetes client): :mod:`.pool` reads and checks a
pool's spec, :mod:`.podtemplate` and :mod:`.locality` make its pods, :mod:`.replicas` which pods
to create or delete, :mod:`.signals` reads Prometheus text, :mod:`.scaling` the token and queue
formulas, :mod:`.policy` the per-pool policy hook, :mod:`.conditions` the status conditions.
:mod:`.kube` is the controller that runs them against the API server (leader only).
``docs/neuronetes.md`` describes the whole.
"""
