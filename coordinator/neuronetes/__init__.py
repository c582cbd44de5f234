"""NeuroNetes' workload layer: ``AgentPool`` and ``ToolBinding`` (``neuronetes.io/v1alpha1``).

Two packages, split by what they may do (lint-imports contracts name the packages):

- :mod:`.decide` decides from plain values — no event loop, HTTP, socket or Kubernetes client:
  the pool's spec, its pods, which to create or delete, the scaling formulas, the status
  conditions and the per-pool policies (:mod:`.decide.policy`).
- :mod:`.kube` does the I/O and calls into :mod:`.decide` (never the reverse): the controller's
  watches and reconcile on the API server (leader only), the HTTP reads of load signals and the
  carbon intensity source.

``docs/neuronetes.md`` describes the whole.
"""
