"""The demo's inference pool: one NeuroNetes AgentPool scaled on a synthetic token load by the
controller's own pure code (:mod:`coordinator.neuronetes`: the pool's pods, the guide's scaling
formulas, the replica plan), its pods placed by the demo's scheduler.

The load is a morning burst on a simulated clock (ten seconds a step, so the cooldown passes
without waiting): tokens queue up, the expected time to first token passes the SLO, the pool
grows to what the formula asks for, then shrinks one replica per cooldown (one step) as the
queue drains.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from common import podkeys
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.neuronetes.decide.podtemplate import (
    POOL_LABEL,
    pod_for,
    pool_template,
    template_hash,
)
from coordinator.neuronetes.decide.pool import PoolSpec, parse_pool
from coordinator.neuronetes.decide.replicas import owned_pod, plan_replicas
from coordinator.neuronetes.decide.scaling import ScaleMemory, TokenSignals, decide, format_seconds

__all__ = ["POOL", "ScaleStep", "format_steps", "pool_manifest", "run_inference_pool"]

POOL: Final = "chat-llama"
STEP_S: Final = 10.0
TOKENS_PER_SECOND: Final = 1000.0  # one replica's prefill + decode throughput
#: Tokens waiting at each step of the simulated morning.
LOAD: Final = (0, 2500, 7000, 9000, 1200, 0, 0, 0, 0)


def pool_manifest(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": POOL, "namespace": namespace, "uid": "demo-pool"},
        "spec": {
            "model": "llama-3-8b",
            "minReplicas": 1,
            "maxReplicas": 6,
            "gpuRequirements": {"count": 1, "topology": {"locality": "any"}},
            "autoscaling": {"slo": {"ttftMs": 1500}, "cooldownSeconds": 10},
        },
    }


@dataclass(frozen=True, slots=True)
class ScaleStep:
    t_s: float
    tokens: float
    ttft: str
    replicas: int
    placed: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "t": self.t_s,
            "tokensInQueue": self.tokens,
            "expectedTTFT": self.ttft,
            "replicas": self.replicas,
            "placed": self.placed,
            "reason": self.reason,
        }


def _mine(cluster: MemoryCluster, pool: PoolSpec) -> list[Mapping[str, Any]]:
    return [
        p
        for p in cluster.pods()
        if p["metadata"].get("namespace") == pool.namespace
        and (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool.name
    ]


async def run_inference_pool(
    cluster: MemoryCluster, namespace: str, settle: Callable[[], Awaitable[None]]
) -> list[ScaleStep]:
    """Drive the pool through :data:`LOAD`; one row per step."""
    pool = parse_pool(pool_manifest(namespace))
    assert pool.autoscaling is not None
    template = pool_template(pool, scheduler_name=podkeys.AGENT_POOL_SCHEDULER_NAME)
    digest = template_hash(template)
    memory, replicas, serial = ScaleMemory(last_scale=0.0), pool.base_replicas(), 0
    steps: list[ScaleStep] = []
    for i, queued in enumerate(LOAD):
        now = i * STEP_S
        decision = decide(
            replicas,
            low=pool.min_replicas,
            high=pool.max_replicas,
            tokens=TokenSignals(float(queued), TOKENS_PER_SECOND),
            slo_s=pool.autoscaling.ttft_s,
            load_s=pool.autoscaling.model_load_s,
            cooldown_s=pool.autoscaling.cooldown_s,
            memory=memory,
            now=now,
        )
        replicas = decision.desired
        plan = plan_replicas(replicas, [owned_pod(p) for p in _mine(cluster, pool)], digest)
        for gone in plan.delete:
            cluster.delete_pod(namespace, gone.name)
        for _ in range(plan.create):
            serial += 1
            body = pod_for(pool, template)
            body["metadata"].pop("generateName")
            body["metadata"]["name"] = f"{POOL}-{serial}"
            cluster.create_pod(body)
        await settle()
        placed = sum(1 for p in _mine(cluster, pool) if p["spec"].get("nodeName"))
        ttft = decision.expected_ttft_s
        steps.append(
            ScaleStep(
                now,
                float(queued),
                format_seconds(ttft) if ttft is not None and math.isfinite(ttft) else "",
                replicas,
                placed,
                decision.reason,
            )
        )
    return steps


def format_steps(steps: list[ScaleStep]) -> str:
    lines = [
        f"\nInference pool {POOL} (AgentPool, llama-3-8b, SLO TTFT 1500ms, 1–6 replicas) on a "
        f"synthetic token load, {TOKENS_PER_SECOND:.0f} tokens/s per replica:\n",
        f"  {'t':>5}  {'queued':>7}  {'TTFT':>7}  {'replicas':>8}  {'placed':>6}  why\n",
    ]
    for s in steps:
        lines.append(
            f"  {s.t_s:>4.0f}s  {s.tokens:>7.0f}  {s.ttft:>7}  {s.replicas:>8}  {s.placed:>6}  "
            f"{s.reason}\n"
        )
    return "".join(lines)
