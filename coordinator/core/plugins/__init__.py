"""The built-in plugins: kube-scheduler's filters and scores, and GPU, MIG and NUMA placement.

Each imports only the framework's interfaces; :mod:`coordinator.core.registry` names them and
holds the default profile.
"""
