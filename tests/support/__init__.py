"""Helpers shared by the test modules; import them as ``tests.support.<module>``.

The repository root is on ``sys.path`` (``pythonpath = ["."]`` in pyproject.toml), so this works
with pytest's default import mode; test modules themselves keep unique basenames.

- ``ci``: skip locally, fail under ``CI=true`` (a missing tool must not pass CI as a skip).
- ``kube_wait``: waiting for objects and Events on the real API server by watch, bounded.
- ``kube_objects``: bare Node objects and agent pods with bound ServiceAccount tokens.
- ``inventory_wait``: waiting for the coordinator's inventory by its change events.
- ``polling``: waiting for in-process state with no change event (metrics, counters), bounded.
- ``clock``: a clock the test moves by hand.
- ``etcd``: compacting the test control plane's etcd (410 Gone end to end).
- ``stream_frames``: hand-built node topologies and capacity-stream frames.
- ``mig``: one MIG instance as NVML reports it.
- ``agent_topologies``, ``fake_profiles``: topologies for labelers, profiles for the fake NVML.
- ``nvml``: whether a real NVIDIA driver is present.
- ``kube_proxy``: a counting HTTP proxy in front of the test API server.
- ``severable``: a TCP forwarder to the test API server a test can cut (the server gone) and
  restore.
- ``pods``: every test's Pod manifests (``pod``, ``gpu_pod``, ``gang_members``, ``host_port``,
  ``yaml_pod``).
- ``sched_hw``: nodes and a one-shot scheduler for the scheduling-core tests.
- ``domain_fabric``: leaf–spine clusters as plain lists for the network-domain tests.
- ``gpu_cluster``: GPU Nodes on the real control plane and a scheduler runtime scoped to them.
- ``gang_cluster``: the same with a leaf–spine fabric and the gang runtime.
- ``sim_cluster``: simulation clusters from YAML text on the fake hardware profiles.
- ``deploy``: the rendered ``deploy/`` kustomization and applying parts of it.
- ``subprocess_env``: the environment for Python child processes (no bytecode written).
"""
