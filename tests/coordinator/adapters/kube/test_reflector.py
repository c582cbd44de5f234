"""The shared list-then-watch loop against a real API server: what it lists and follows (one
namespace, one label selector), a watch the server ends resumed without a re-list, and a resource
type the server does not serve. (410 Gone and the re-list: test_kube_sync_gone.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from common.kube import CONFIG_MAPS, NAMESPACES, KubeClient, KubeObject, Resource
from coordinator.adapters.kube.reflector import Change, Reflector
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

WIDGETS = Resource("example.topos.io", "v1", "widgets", namespaced=True, kind="Widget")


class Names:
    """ConfigMap name → its ``data.v``, as the reflector hands them over."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.replaced: list[list[str]] = []

    def replace(self, items: list[KubeObject]) -> None:
        self.replaced.append(sorted(obj["metadata"]["name"] for obj in items))
        self.data = {obj["metadata"]["name"]: (obj.get("data") or {}).get("v", "") for obj in items}

    def apply(self, kind: Change, obj: KubeObject) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            del self.data[name]
        else:
            self.data[name] = (obj.get("data") or {}).get("v", "")


def _config_map(name: str, app: str, value: str = "1") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"v": value},
    }


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Reflector], None]]:
    tasks: list[asyncio.Task[None]] = []
    yield lambda reflector: tasks.append(asyncio.create_task(reflector.run()))
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_lists_then_follows_only_its_namespace_and_labels_resuming_ended_watches(
    kube: KubeClient,
    namespace: str,
    unique_name: Callable[[str], str],
    running: Callable[[Reflector], None],
) -> None:
    other = unique_name("elsewhere")
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    await kube.create(CONFIG_MAPS, _config_map("old", "x"), namespace=namespace)
    await kube.create(CONFIG_MAPS, _config_map("stranger", "y"), namespace=namespace)
    await kube.create(CONFIG_MAPS, _config_map("far", "x"), namespace=other)
    names = Names()
    listed: list[int] = []
    reflector = Reflector(
        kube,
        CONFIG_MAPS,
        names,
        namespace=namespace,
        label_selector="app=x",
        on_listed=lambda: listed.append(1),
        watch_timeout_s=1,
    )
    running(reflector)
    async with asyncio.timeout(30):  # guards a hang only
        await reflector.synced.wait()
    assert names.replaced == [["old"]]
    assert listed == [1]

    await asyncio.sleep(2.5)  # the server has ended the first watch (timeoutSeconds=1) by now
    await kube.create(CONFIG_MAPS, _config_map("far-new", "x"), namespace=other)
    await kube.create(CONFIG_MAPS, _config_map("stranger-new", "y"), namespace=namespace)
    await kube.create(CONFIG_MAPS, _config_map("new", "x"), namespace=namespace)
    await kube.patch(CONFIG_MAPS, "old", {"data": {"v": "2"}}, namespace=namespace)
    await eventually(lambda: names.data == {"old": "2", "new": "1"}, what="create and update")
    await kube.delete(CONFIG_MAPS, "old", namespace=namespace)
    await eventually(lambda: names.data == {"new": "1"}, what="the deletion")
    # resumed from the last resourceVersion each time the server ended the watch: never re-listed
    assert reflector.relists == 1
    assert listed == [1]


async def test_a_type_the_server_does_not_serve_is_empty_only_where_that_is_allowed(
    kube: KubeClient, namespace: str, running: Callable[[Reflector], None]
) -> None:
    optional, required = Names(), Names()
    absent_ok = Reflector(kube, WIDGETS, optional, namespace=namespace, missing_ok=True)
    absent_bad = Reflector(kube, WIDGETS, required, namespace=namespace, backoff_max_s=0.2)
    running(absent_ok)
    running(absent_bad)
    async with asyncio.timeout(30):  # guards a hang only
        await absent_ok.synced.wait()
    assert optional.replaced == [[]]
    assert not absent_ok.installed
    await asyncio.sleep(1.0)  # several retries of the required one
    assert not absent_bad.synced.is_set()
    assert required.replaced == []
