"""NeuroNetes' pure half: what an AgentPool's pods are and what the controller does about them.

No event loop, HTTP, socket or Kubernetes client in this package (a lint-imports contract); every
function takes plain values and returns values. The I/O is :mod:`coordinator.neuronetes.kube`.
"""
