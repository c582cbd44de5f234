"""``KubeClient``: the Kubernetes verbs Topos uses, over kubernetes_asyncio, as plain JSON.

Built in layers: ``core`` (connection, one request, JSON calls under the ``RetryPolicy``),
``verbs`` (get/list/watch/create/replace/patch/delete on any ``Resource``), then one module per
resource family: ``pods`` (bind, evict), ``events``, ``leases``, ``tokens``.

    async with await KubeClient.connect("kubeconfig") as kube:
        node = await kube.get(NODES, "gpu-1")
        async for kind, pod in kube.watch(PODS, namespace="ns", resource_version=rv):
            ...
"""

from __future__ import annotations

from common.kube.events import EventVerbs
from common.kube.leases import LeaseVerbs
from common.kube.pods import PodVerbs
from common.kube.tokens import TokenVerbs


class KubeClient(PodVerbs, EventVerbs, LeaseVerbs, TokenVerbs):
    """An async Kubernetes client returning JSON dicts. Close it (or use ``async with``)."""
