"""The shared list-then-watch loop against a real API server: what it lists and follows (one
namespace, one label selector), a watch the server ends resumed without a re-list, and a resource
type the server does not serve; the first list streamed as a watch list (the same objects as a
LIST), a stream that syncs again after 410 Gone dropping what was deleted meanwhile, and a server
that refuses watch lists listed page by page. (410 Gone and the paged re-list:
test_kube_sync_gone.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest

from common.kube import CONFIG_MAPS, NAMESPACES, Gone, KubeClient, KubeObject, Resource
from coordinator.adapters.kube.reflector import Change, Reflector
from devcluster.controlplane import ControlPlane
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

WIDGETS = Resource("example.topos.io", "v1", "widgets", namespaced=True, kind="Widget")


class Names:
    """ConfigMap name → its ``data.v``, as the reflector hands them over."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.replaced: list[list[str]] = []
        self.objects: list[KubeObject] = []
        self.deleted: list[str] = []

    def replace(self, items: list[KubeObject]) -> None:
        self.objects = items
        self.replaced.append(sorted(obj["metadata"]["name"] for obj in items))
        self.data = {obj["metadata"]["name"]: (obj.get("data") or {}).get("v", "") for obj in items}

    def apply(self, kind: Change, obj: KubeObject) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.deleted.append(name)
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
    client = Cuttable(kube)
    reflector = Reflector(
        cast(KubeClient, client),
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

    # The server ends the first watch after timeoutSeconds=1; the next one resumes from its
    # resourceVersion.
    await eventually(lambda: client.resumed > 0, what="a watch the server ended, resumed")
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
    asking = Cuttable(kube)
    absent_bad = Reflector(
        cast(KubeClient, asking), WIDGETS, required, namespace=namespace, backoff_max_s=0.2
    )
    running(absent_ok)
    running(absent_bad)
    async with asyncio.timeout(30):  # guards a hang only
        await absent_ok.synced.wait()
    assert optional.replaced == [[]]
    assert not absent_ok.installed
    await eventually(lambda: asking.watches >= 4, what="several retries of the required one")
    assert not absent_bad.synced.is_set()
    assert required.replaced == []


class Cuttable:
    """The admin client, whose watches can be cut as if the connection dropped and the
    resourceVersion had expired meanwhile: once ``cut`` is set, the next watch line is lost and
    the watch ends in 410 Gone. ``watches`` counts the watches asked for, ``resumed`` those
    resumed from a resourceVersion, ``watch_lists`` those asked as a watch list. With ``hold``
    given, the cut watch waits for it to be set before it ends (the test's changes all made
    before the reflector lists again)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.cut = False
        self.hold: asyncio.Event | None = None
        self.watches = 0
        self.resumed = 0
        self.watch_lists = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def watch_lines(self, resource: Resource, **kw: Any) -> AsyncIterator[bytes]:
        self.watches += 1
        self.resumed += kw.get("resource_version") is not None
        self.watch_lists += bool(kw.get("initial_events"))
        async for line in self._client.watch_lines(resource, **kw):
            if self.cut:
                self.cut = False
                if self.hold is not None:
                    await self.hold.wait()
                raise Gone("too old resource version", status=410)
            yield line


async def test_the_first_sync_streams_what_a_list_gives_and_a_resync_drops_the_deleted(
    kube: KubeClient, namespace: str, running: Callable[[Reflector], None]
) -> None:
    for name in ("a", "b", "c"):
        await kube.create(CONFIG_MAPS, _config_map(name, "x"), namespace=namespace)
    await kube.create(CONFIG_MAPS, _config_map("other", "y"), namespace=namespace)
    client = Cuttable(kube)
    names = Names()
    reflector = Reflector(
        cast(KubeClient, client), CONFIG_MAPS, names, namespace=namespace, label_selector="app=x"
    )
    running(reflector)
    async with asyncio.timeout(30):  # guards a hang only
        await reflector.synced.wait()
    listed = await kube.list(CONFIG_MAPS, namespace=namespace, label_selector="app=x")
    assert (reflector.streamed, reflector.relists, client.watch_lists) == (1, 1, 1)
    assert sorted(names.objects, key=lambda o: o["metadata"]["name"]) == listed["items"]

    await kube.create(CONFIG_MAPS, _config_map("d", "x"), namespace=namespace)
    await eventually(lambda: "d" in names.data, what="the stream going on as the watch")
    # Disconnected: "a" is deleted and "e" created while the watch is lost, then 410 Gone.
    client.hold, client.cut = asyncio.Event(), True
    await kube.delete(CONFIG_MAPS, "a", namespace=namespace)
    await kube.create(CONFIG_MAPS, _config_map("e", "x"), namespace=namespace)
    client.hold.set()  # (else the list may come before "e" is made: it then comes as watched)
    await eventually(lambda: reflector.relists == 2, what="the sync after 410 Gone")
    assert names.replaced[-1] == ["b", "c", "d", "e"]
    assert names.deleted == []  # dropped by the replace, not by a watch event
    assert (reflector.streamed, client.watch_lists) == (2, 2)
    await kube.patch(CONFIG_MAPS, "b", {"data": {"v": "2"}}, namespace=namespace)
    await eventually(lambda: names.data.get("b") == "2", what="following after the re-sync")


async def test_a_server_that_refuses_watch_lists_is_listed_page_by_page(
    uncached_plane: ControlPlane, unique_name: Callable[[str], str]
) -> None:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as client:
        namespace = unique_name("paged")
        await client.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await client.create(CONFIG_MAPS, _config_map("old", "x"), namespace=namespace)
        names = Names()
        reflector = Reflector(client, CONFIG_MAPS, names, namespace=namespace)
        task = asyncio.create_task(reflector.run())
        try:
            async with asyncio.timeout(30):  # guards a hang only
                await reflector.synced.wait()
            assert names.replaced == [["old"]]
            assert (reflector.watch_list, reflector.streamed, reflector.relists) == (False, 0, 1)
            await client.create(CONFIG_MAPS, _config_map("new", "x"), namespace=namespace)
            await eventually(lambda: set(names.data) == {"old", "new"}, what="the watch")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
