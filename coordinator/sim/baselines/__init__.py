"""Every baseline Topos is measured against, in one place (``topos simulate``, the benchmarks
and the tests use these; none keeps a copy):

- :mod:`.perpod` — ``firstfit`` and ``spread`` (kube-scheduler with the device plugin) as
  framework profiles, for single pods and gangs member by member (``coordinator.sim.policies``,
  ``benchmarks/decision_latency.py``, ``benchmarks/decision_scaling.py``);
- :mod:`.gangs` — first-fit and spread of a gang's members on the planners' capacity model
  (``benchmarks/gang_placement.py``);
- :mod:`.scan` — the inter-pod plugins as they were before per-selector counts (each PreFilter
  scans the pods): ``benchmarks/affinity_scaling.py``'s "scan", and the oracle of
  ``tests/coordinator/core/test_sched_interpod_indexes.py``.

- :mod:`.sharing` — the FGD paper's GPU-sharing baselines (random, first-fit, best-fit, packing,
  FGD) as framework profiles: ``benchmarks/sharing_trace.py``.
"""
