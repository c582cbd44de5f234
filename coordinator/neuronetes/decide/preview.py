"""An AgentPool's pods before the pool exists (what-if): the pods the controller would create
for ``spec.replicas`` (else ``minReplicas``) from the pool's template, before its policies run
(they read live node facts: model caches, prices, carbon), with the priority its PriorityClass
would give them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from common.podkeys import AGENT_POOL_SCHEDULER_NAME
from coordinator.neuronetes.decide.podtemplate import API_VERSION, pod_for, pool_template
from coordinator.neuronetes.decide.pool import parse_pool

__all__ = ["AGENT_POOL", "pool_pods"]

#: (apiVersion, kind) of the documents :func:`pool_pods` expands.
AGENT_POOL: Final = (API_VERSION, "AgentPool")


def pool_pods(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pool's pods, named ``<pool>-<i>``; ``PoolProblem`` (a ``ValueError`` naming the
    field) for a spec the controller would refuse."""
    pool = parse_pool(doc)
    template = pool_template(pool, scheduler_name=AGENT_POOL_SCHEDULER_NAME)
    pods = []
    for i in range(pool.base_replicas()):
        pod = pod_for(pool, template)
        meta = pod["metadata"]
        meta.pop("generateName", None)
        meta["name"] = f"{pool.name}-{i}"
        digest = hashlib.sha1(f"AgentPool/{pool.namespace}/{meta['name']}".encode()).hexdigest()
        meta["uid"] = f"whatif-{digest[:24]}"
        if pool.priority is not None:  # what its PriorityClass resolves to on admission
            pod["spec"]["priority"] = pool.priority
        pods.append(pod)
    return pods
