"""NeuroNetes' pure half: what an AgentPool's pods are and what the controller does about them.

:mod:`.pool` reads and checks a pool's spec, :mod:`.podtemplate` and :mod:`.locality` make its
pods, :mod:`.replicas` says which pods to create or delete, :mod:`.signals` reads Prometheus text,
:mod:`.scaling` holds the token and queue formulas, :mod:`.hooks` the per-pool policy hook,
:mod:`.policy` the guide's policies, :mod:`.conditions` the status conditions and
:mod:`.settings` the ``neuronetes`` configuration section.

No event loop, HTTP, socket or Kubernetes client anywhere in this package (a lint-imports
contract on the package, so a new module is held to it too): every function takes plain values
and returns values. The I/O is :mod:`coordinator.neuronetes.kube`.
"""
