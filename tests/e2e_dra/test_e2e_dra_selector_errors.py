"""CEL selectors that fail at run time, and deep ones that do not, against the real kube-scheduler.

The same pod (a claim naming one GPU) goes to the real kube-scheduler of the harness's version
and to a real ``topos coordinator``, on the same node and slice. A selector the API server
accepted but that fails on the devices (a missing attribute, a type mismatch, a bad quantity, a
division by zero, a result that is not a bool), in the claim or in its DeviceClass, is reported
by kube-scheduler as ``running "DynamicResources" filter plugin: claim <ns>/<name>: selector
#<i>: CEL runtime error: <cel-go's error>`` (``class <name>: …`` for the class's): Topos's
message starts with the very same text and adds the request and the device it failed on. A
selector nested as deep as the API server allows (248 levels; it refuses 249) is evaluated and
the pod bound, by both.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from common.kube import DEVICE_CLASSES, PODS, KubeClient, KubeError, NotFound
from devcluster.churn.fleet import RUN_LABEL
from devcluster.kube_wait import scheduled_message, wait_for_object
from tests.e2e_dra.conftest import DraFleet, dra_fleet
from tests.support.dra import claim, claim_pod, gpu_class

pytestmark = pytest.mark.kube

GPU = "device.attributes['gpu.nvidia.com']"

#: selectors kube-scheduler fails on at run time, with the error cel-go gives
RUNTIME_ERRORS = {
    "compare": (f"{GPU}.productName > 5", "no such overload"),
    "missing": (f"{GPU}.noSuchAttribute == 'x'", "no such key: noSuchAttribute"),
    "quantity": ("quantity('lots') == quantity('1')", "quantities must match"),
    "divide": ("1/0 == 1", "division by zero"),
    "not-bool": (f"{GPU}.productName", "could not be converted to bool"),
}

#: kube's own nesting limit: the API server refuses one level more
DEEPEST = 248


def selected(name: str, device_class: str, expression: str) -> dict[str, Any]:
    obj = claim(name, 1, device_class=device_class)
    exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
    exactly["selectors"] = [{"cel": {"expression": expression}}]
    return obj


async def message(fleet: DraFleet, pod: str) -> str:
    obj = await wait_for_object(
        fleet.kube,
        PODS,
        pod,
        lambda p: scheduled_message(p, status="False") is not None,
        namespace=fleet.namespace,
        what=f"pod {pod} explained",
    )
    assert not obj["spec"].get("nodeName")
    return str(scheduled_message(obj, status="False"))


async def both(fleet: DraFleet, kube_scheduler: str, name: str, claim_name: str) -> None:
    """Pods ``k-<name>`` (kube-scheduler) and ``t-<name>`` (Topos) sharing the claim."""
    on = {RUN_LABEL: fleet.nodes[0].name.rsplit("-", 1)[-1]}
    await fleet.create(
        claim_pod(f"k-{name}", claim_name=claim_name, scheduler=kube_scheduler, node_selector=on)
    )
    await fleet.create(claim_pod(f"t-{name}", claim_name=claim_name, scheduler="topos"))


async def test_a_selector_failing_at_run_time_is_named_as_kube_scheduler_names_it(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    directory: Path,
    kube_scheduler_name: str,
) -> None:
    bad_class = f"bad-{uuid.uuid4().hex[:6]}.nvidia.com"
    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        broken = gpu_class(bad_class)
        broken["spec"]["selectors"].append({"cel": {"expression": f"{GPU}.noSuchAttribute"}})
        await kube.create(DEVICE_CLASSES, broken)
        try:
            for case, (expression, _) in RUNTIME_ERRORS.items():
                await fleet.create(selected(case, fleet.class_name, expression))
                await both(fleet, kube_scheduler_name, case, case)
            await fleet.create(claim("by-class", 1, device_class=bad_class))
            await both(fleet, kube_scheduler_name, "by-class", "by-class")
            # a sound claim still gets its GPU beside them
            await fleet.create(claim("fine", 1, device_class=fleet.class_name))
            await fleet.create(claim_pod("fine", claim_name="fine", scheduler="topos"))
            await fleet.bound("fine")

            for case, (_, error) in RUNTIME_ERRORS.items():
                theirs = await message(fleet, f"k-{case}")
                ours = await message(fleet, f"t-{case}")
                prefix = (
                    f'running "DynamicResources" filter plugin: claim {namespace}/{case}: '
                    "selector #0: CEL runtime error: "
                )
                assert theirs.startswith(prefix), theirs
                assert error in theirs, theirs
                assert ours.startswith(theirs), (ours, theirs)
                assert ours[len(theirs) :].startswith(" (request gpus, device "), ours
            theirs = await message(fleet, "k-by-class")
            ours = await message(fleet, "t-by-class")
            assert theirs == (
                f'running "DynamicResources" filter plugin: class {bad_class}: selector #1: '
                "CEL runtime error: no such key: noSuchAttribute"
            )
            assert ours.startswith(theirs), (ours, theirs)
            assert f"(request gpus of claim {namespace}/by-class, device " in ours, ours
        finally:
            with contextlib.suppress(NotFound, KubeError):
                await kube.delete(DEVICE_CLASSES, bad_class)


async def test_a_selector_as_deep_as_the_api_server_allows_selects_devices(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    directory: Path,
    kube_scheduler_name: str,
) -> None:
    def nested(depth: int) -> str:
        expression = "device.driver == 'gpu.nvidia.com'"
        for i in range(depth):
            expression = f"(device.driver != 'x{i}' && {expression})"
        return expression

    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        with pytest.raises(KubeError, match="recursion limit"):
            await fleet.create(selected("too-deep", fleet.class_name, nested(DEEPEST + 1)))
        for name, expression in (
            ("parens", "(" * DEEPEST + "true" + ")" * DEEPEST),
            ("ands", nested(DEEPEST)),
        ):
            await fleet.create(selected(name, fleet.class_name, expression))
            await fleet.create(selected(f"{name}-k", fleet.class_name, expression))
            on = {RUN_LABEL: fleet.nodes[0].name.rsplit("-", 1)[-1]}
            pod = claim_pod(
                f"k-{name}", claim_name=f"{name}-k", scheduler=kube_scheduler_name, node_selector=on
            )
            await fleet.create(pod)
            await fleet.bound(f"k-{name}")
            await fleet.create(claim_pod(f"t-{name}", claim_name=name, scheduler="topos"))
            await fleet.bound(f"t-{name}")
