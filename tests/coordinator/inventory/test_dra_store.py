"""The DRA object store: watched ResourceSlices, DeviceClasses and ResourceClaims become the
state a scheduling cycle sees; a malformed object is left out with its reason and counted, and
harms no other; the state is built again only after something changed, and a cluster without
DRA objects costs one shared empty state."""

from __future__ import annotations

from typing import Any

from coordinator.inventory.dra import EMPTY, DraChange, DraStore

DRIVER = "gpu.nvidia.com"


def gpu_slice(node: str, *devices: str, name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": d, "attributes": {"uuid": {"string": f"GPU-{node}-{d}"}}} for d in devices
            ],
        },
    }


def gpu_class(selector: str = 'device.driver == "gpu.nvidia.com"') -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER, "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": 2}}]
            }
        },
    }


def test_a_cluster_without_dra_objects_costs_one_shared_empty_state() -> None:
    store = DraStore()
    assert store.empty
    assert store.state() is EMPTY
    store.replace("ResourceSlice", [])
    assert store.state() is EMPTY
    assert store.version == 0


def test_watched_objects_become_the_state_and_it_is_rebuilt_only_after_a_change() -> None:
    store = DraStore()
    changes: list[DraChange] = []
    store.subscribe(changes.append)
    store.replace("ResourceSlice", [gpu_slice("gpu-1", "gpu-0", "gpu-1")])
    store.replace("DeviceClass", [gpu_class()])
    store.apply("ResourceClaim", "ml/train", claim("train"))

    state = store.state()
    assert [s.name for s in state.slices] == [f"gpu-1-{DRIVER}"]
    assert [c.name for c in state.classes] == [DRIVER]
    assert [(c.namespace, c.name) for c in state.claims] == [("ml", "train")]
    assert store.state() is state  # nothing changed: the same state
    store.apply("ResourceClaim", "ml/train", claim("train"))  # the same object again
    assert store.state() is state
    assert len(changes) == 3

    store.replace("ResourceSlice", [])  # re-listed: the slice is gone
    assert store.state() is not state
    assert store.state().slices == ()
    assert changes[-1] == DraChange("ResourceSlice", f"gpu-1-{DRIVER}", None)


def test_a_malformed_object_is_left_out_with_its_reason_and_harms_no_other() -> None:
    store = DraStore()
    bad = gpu_slice("gpu-2", "gpu-0", name="broken")
    del bad["spec"]["driver"]
    store.replace("ResourceSlice", [gpu_slice("gpu-1", "gpu-0"), bad])
    store.replace("DeviceClass", [gpu_class()])
    store.apply("ResourceClaim", "ml/train", claim("train"))

    state = store.state()
    assert [s.name for s in state.slices] == [f"gpu-1-{DRIVER}"]
    assert [c.name for c in state.classes] == [DRIVER]
    assert [c.name for c in state.claims] == ["train"]
    error = store.errors[("ResourceSlice", "broken")]
    assert "driver" in error.message
    assert store.rejected == 1

    fixed = gpu_slice("gpu-2", "gpu-0", name="broken")
    store.apply("ResourceSlice", "broken", fixed)  # fixed: used, the reason forgotten
    assert sorted(s.name for s in store.state().slices) == ["broken", f"gpu-1-{DRIVER}"]
    assert not store.errors


def test_a_parser_that_fails_is_a_rejected_object_not_a_broken_watch() -> None:
    def broken(kind: Any, obj: Any) -> Any:
        raise RuntimeError("parser bug")

    store = DraStore(parse=broken)
    store.apply("ResourceClaim", "ml/train", claim("train"))
    assert store.raw("ResourceClaim", "ml/train") == claim("train")
    assert "parser bug" in store.errors[("ResourceClaim", "ml/train")].message
    assert store.state().claims == ()


BAD_CLAIM = {"metadata": {"name": "bad", "namespace": "ml"}, "spec": {"devices": {"requests": 7}}}


def test_a_claim_change_keeps_the_device_indexes_and_counts_as_a_full_rebuild_would() -> None:
    store = DraStore()
    store.replace("ResourceSlice", [gpu_slice("gpu-1", "gpu-0", "gpu-1")])
    store.replace("DeviceClass", [gpu_class()])
    store.apply("ResourceClaim", "ml/train", claim("train"))
    before = store.state()
    allocated = claim("train")
    allocated["metadata"]["resourceVersion"] = "2"
    allocated["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": DRIVER, "pool": "gpu-1", "device": "gpu-0"}
                ]
            }
        }
    }
    store.apply("ResourceClaim", "ml/train", allocated)
    store.apply("ResourceClaim", "ml/bad", BAD_CLAIM)
    after = store.state()
    assert after is not before
    assert after._pool_slices is before._pool_slices  # pools not sorted and checked again
    fresh = DraStore()
    fresh.replace("ResourceSlice", [gpu_slice("gpu-1", "gpu-0", "gpu-1")])
    fresh.replace("DeviceClass", [gpu_class()])
    fresh.apply("ResourceClaim", "ml/train", allocated)
    fresh.apply("ResourceClaim", "ml/bad", BAD_CLAIM)
    full = fresh.state()
    assert [d.device for d in after.held] == [d.device for d in full.held] == ["gpu-0"]
    assert after.claim_by_key.keys() == full.claim_by_key.keys() == {"ml/train"}
    assert after.rejected.keys() == full.rejected.keys() == {("ResourceClaim", "ml/bad")}
    assert [d.id.device for d in after.devices_on("gpu-1", {})] == ["gpu-0", "gpu-1"]
    store.replace("ResourceSlice", [gpu_slice("gpu-1", "gpu-0", "gpu-1", "gpu-2")])
    assert [d.id.device for d in store.state().devices_on("gpu-1", {})] == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
    ]  # a slice change: built again
