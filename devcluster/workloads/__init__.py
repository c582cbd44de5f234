"""The workload controllers users run (JobSet, LeaderWorkerSet, Kubeflow Trainer, KubeRay), built
from their Go modules at exact versions and run against the local control plane.

- :mod:`~devcluster.workloads.catalog`: one row per controller (module, version, main package,
  CRDs, webhooks, objects, command line, configuration);
- :mod:`~devcluster.workloads.build`: find or build into ``~/.cache/topos/controllers/``;
- :mod:`~devcluster.workloads.manifests`: the module's CRDs, objects and webhook configurations
  (patched, pointed at loopback);
- :mod:`~devcluster.workloads.launch`: install and start them, wait until ready, stop.

``python -m devcluster.workloads ensure [NAME…]`` builds them (docs/workloads.md).
"""
