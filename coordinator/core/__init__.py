"""The pure scheduling core: no asyncio, no HTTP, no Kubernetes client.

A pod object and a :class:`~coordinator.core.snapshot.snapshot.Snapshot` in, a decision or a
failure out. Packages, bottom up:

- :mod:`.podspec` — every Topos and alias key of a pod parsed once (``parse_pod``).
- :mod:`.snapshot` — ``NodeInfo``/``PodInfo``/``Snapshot``: what the plugins look at, with
  the indexes a cycle narrows its nodes by (``CapacityIndex``, nodes by label value) and the
  pod counts per topology domain the inter-pod plugins read (``podcounts``).
- :mod:`.framework` — plugin interfaces, results, status, cycle state, config, ``schedule_one``;
  it names no plugin.
- :mod:`.plugins` — kube-scheduler's filters and scores plus GPU, MIG and NUMA placement; they
  import only the framework's interfaces.
- :mod:`.registry` — the plugins by name, the default profile, ``build_framework``.
- :mod:`.gangs`, :mod:`.domains`, :mod:`.preemption` — whole-gang planning, leaf/spine
  domains, victim choice.
- :mod:`.queue` — the scheduling queue's ordering and backoff (clock injected).

See docs/architecture.md and docs/scheduling.md.
"""
