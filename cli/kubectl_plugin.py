"""``kubectl topos``: the coordinator's view, from kubectl (the executable ``kubectl-topos``).

    kubectl topos nodes                      GPUs free per node, per NUMA node, MIG free
    kubectl topos explain pod/NAME [-n NS]   where a pod went and why, or why it is pending
    kubectl topos gangs [-n NS]              gangs and how many members are placed
    kubectl topos whatif -f FILE [-n NS]     would this manifest fit now, where, why not, and
                                             what would make it fit (docs/whatif.md)
    kubectl topos mismatches [-n NS]         pods the node gave other GPUs than Topos assigned
    kubectl topos dra-shares NODE            claims sharing the node's DRA GPUs, and how much

It talks to the coordinator through the API server's service proxy
(``/api/v1/namespaces/topos-system/services/https:topos-coordinator:443/proxy/v1/…``) with the
user's kubeconfig, so it needs no network path of its own to the coordinator and is authorised by
RBAC: the user needs ``get`` on ``services/proxy`` of that Service (the ``topos-viewer`` Role in
deploy/). ``--coordinator URL`` talks to a coordinator directly instead (a port-forward, the
embedded demo's ``--serve``). The tables are drawn by ``cli.kubectl_rows``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml

from cli.kubectl_rows import (
    DRA_SHARE_HEADERS,
    GANG_HEADERS,
    GPU_HEADERS,
    MISMATCH_HEADERS,
    NODE_HEADERS,
    dra_share_rows,
    gang_row,
    gpu_rows,
    mismatch_rows,
    node_row,
    table,
)
from cli.whatif_text import whatif_text
from common.kube import Forbidden, KubeClient, KubeError, NotFound, Resource, Unreachable

SERVICES = Resource("", "v1", "services", namespaced=True, kind="Service")
DEFAULT_NAMESPACE = "topos-system"
DEFAULT_SERVICE = "https:topos-coordinator:443"


class PluginError(Exception):
    """Printed as one line: ``kubectl-topos: <message>``."""


class Transport(Protocol):
    async def get_json(self, path: str) -> Any: ...

    async def post_json(self, path: str, body: Any) -> Any: ...

    async def close(self) -> None: ...


class ProxyTransport:
    """GET through the API server's service proxy."""

    def __init__(self, client: KubeClient, *, namespace: str, service: str) -> None:
        self._client = client
        self._namespace = namespace
        self._service = service

    async def get_json(self, path: str) -> Any:
        return await self._proxied(
            self._client.get(
                SERVICES, self._service, namespace=self._namespace, subresource="proxy" + path
            )
        )

    async def post_json(self, path: str, body: Any) -> Any:
        return await self._proxied(
            self._client.create(
                SERVICES,
                body,
                name=self._service,
                namespace=self._namespace,
                subresource="proxy" + path,
            )
        )

    async def _proxied(self, call: Coroutine[Any, Any, Any]) -> Any:
        where = f"service {self._service} in namespace {self._namespace}"
        try:
            return await call
        except Forbidden as exc:
            raise PluginError(
                f"not allowed to reach the coordinator ({exc.message}); ask for the topos-viewer "
                f"Role in {self._namespace}"
            ) from exc
        except NotFound as exc:
            if exc.reason == "NotFound" and "services" in exc.message:
                raise PluginError(f"no coordinator: {where} not found ({exc.message})") from exc
            raise PluginError(exc.message) from exc
        except Unreachable as exc:
            raise PluginError(f"cannot reach the API server: {exc.message}") from exc
        except KubeError as exc:
            if exc.status == 503:
                raise PluginError(
                    f"the coordinator ({where}) is not answering: {exc.message}"
                ) from exc
            raise PluginError(exc.message) from exc

    async def close(self) -> None:
        await self._client.close()


class DirectTransport:
    """GET from a coordinator URL (port-forward, demo)."""

    def __init__(self, base: str, *, token: str | None, ca_file: str | None) -> None:
        self._base = base.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        context: ssl.SSLContext | bool = True
        if ca_file:
            context = ssl.create_default_context(cafile=ca_file)
        self._session = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=30),
            connector=aiohttp.TCPConnector(ssl=context),
        )

    async def get_json(self, path: str) -> Any:
        return await self._request("GET", path, None)

    async def post_json(self, path: str, body: Any) -> Any:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: Any) -> Any:
        url = self._base + path
        try:
            async with self._session.request(method, url, json=body) as resp:
                body = await resp.read()
                try:
                    decoded = json.loads(body) if body else None
                except ValueError:
                    decoded = None
                if resp.status >= 400:
                    message = decoded.get("message") if isinstance(decoded, dict) else None
                    raise PluginError(
                        f"{resp.status}: {message or body[:200].decode(errors='replace')}"
                    )
                return decoded
        except aiohttp.ClientError as exc:
            raise PluginError(f"cannot reach the coordinator at {self._base}: {exc}") from exc

    async def close(self) -> None:
        await self._session.close()


def _items(doc: Any, *keys: str) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [x for x in doc if isinstance(x, dict)]
    if isinstance(doc, dict):
        for key in keys:
            if isinstance(doc.get(key), list):
                return [x for x in doc[key] if isinstance(x, dict)]
    raise PluginError("the coordinator's answer has an unexpected shape")


# --- commands -----------------------------------------------------------------------------------


async def cmd_nodes(transport: Transport, args: argparse.Namespace) -> str:
    doc = await transport.get_json("/v1/inventory")
    nodes = sorted(_items(doc, "nodes", "items"), key=lambda n: str(n.get("name")))
    if args.output == "json":
        return json.dumps(nodes, indent=2, sort_keys=True)
    if not nodes:
        return "No GPU nodes known to the coordinator."
    return table(NODE_HEADERS, [node_row(n) for n in nodes])


async def cmd_dra_shares(transport: Transport, args: argparse.Namespace) -> str:
    node = await transport.get_json(f"/v1/nodes/{args.node}")
    if args.output == "json":
        return json.dumps(node.get("dra_shares") or [], indent=2, sort_keys=True)
    rows = dra_share_rows(node)
    if not rows:
        return f"No DRA device of node {args.node} is shared."
    return table(DRA_SHARE_HEADERS, rows)


async def cmd_gpus(transport: Transport, args: argparse.Namespace) -> str:
    doc = await transport.get_json("/v1/inventory")
    nodes = sorted(_items(doc, "nodes", "items"), key=lambda n: str(n.get("name")))
    if args.node:
        nodes = [n for n in nodes if n.get("name") == args.node]
        if not nodes:
            raise PluginError(f"node {args.node!r} is not known to the coordinator")
    rows = [row for n in nodes for row in gpu_rows(n)]
    if args.output == "json":
        keys = [h.lower() for h in GPU_HEADERS]
        return json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2)
    if not rows:
        return "No GPUs known to the coordinator."
    return table(GPU_HEADERS, rows)


async def cmd_mismatches(transport: Transport, args: argparse.Namespace) -> str:
    doc = await transport.get_json("/v1/inventory")
    nodes = sorted(_items(doc, "nodes", "items"), key=lambda n: str(n.get("name")))
    rows = sorted(row for n in nodes for row in mismatch_rows(n))
    if args.namespace:
        rows = [r for r in rows if r[0] == args.namespace]
    if args.output == "json":
        keys = [h.lower() for h in MISMATCH_HEADERS]
        return json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2)
    if not rows:
        return "No pods hold other GPUs than Topos assigned."
    return table(MISMATCH_HEADERS, rows)


async def cmd_gangs(transport: Transport, args: argparse.Namespace) -> str:
    doc = await transport.get_json("/v1/gangs")
    gangs = _items(doc, "items", "gangs")
    if args.namespace:
        gangs = [g for g in gangs if g.get("namespace") == args.namespace]
    if args.output == "json":
        return json.dumps(gangs, indent=2, sort_keys=True)
    if not gangs:
        return "No gangs."
    return table(GANG_HEADERS, [gang_row(g) for g in gangs])


def read_manifest(path: str) -> list[Any]:
    """The documents of a YAML (or JSON) file, ``-`` for stdin, empty documents dropped."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise PluginError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PluginError(f"{path} is not YAML: {exc}") from exc
    if not docs:
        raise PluginError(f"{path} holds no documents")
    return docs


def _in_namespace(docs: list[Any], namespace: str) -> list[Any]:
    """Documents without a namespace land in ``namespace``, as ``kubectl apply`` puts them."""
    out = []
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if isinstance(meta, dict) and not meta.get("namespace"):
            doc = {**doc, "metadata": {**meta, "namespace": namespace}}
        out.append(doc)
    return out


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise PluginError(f"--budget {text!r}: give seconds (e.g. 2.5) or none") from None


#: Exit status of ``whatif`` when the answer is "does not fit now" (1: an error).
DOES_NOT_FIT = 2


async def cmd_whatif(transport: Transport, args: argparse.Namespace) -> str:
    namespace = args.namespace or context_namespace(args.kubeconfig, args.context)
    docs = _in_namespace(read_manifest(args.filename), namespace)
    body: dict[str, Any] = {"documents": docs}
    if args.budget is not None:
        body["budget_s"] = None if args.budget == "none" else _seconds(args.budget)
    doc = await transport.post_json("/v1/whatif", body)
    if not isinstance(doc, dict):
        raise PluginError("the coordinator's answer has an unexpected shape")
    args.exit_code = 0 if doc.get("fits") else DOES_NOT_FIT
    if args.output == "json":
        return json.dumps(doc, indent=2, sort_keys=True)
    return whatif_text(doc)


def parse_pod_ref(ref: str) -> str:
    kind, sep, name = ref.partition("/")
    if not sep:
        kind, name = "pod", ref
    if kind not in ("pod", "pods", "po") or not name or "/" in name:
        raise PluginError(f"explain takes pod/NAME, not {ref!r}")
    return name


async def cmd_explain(transport: Transport, args: argparse.Namespace) -> str:
    name = parse_pod_ref(args.pod)
    namespace = args.namespace or context_namespace(args.kubeconfig, args.context)
    doc = await transport.get_json(f"/v1/pods/{namespace}/{name}/explain")
    if args.output == "json":
        return json.dumps(doc, indent=2, sort_keys=True)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).rstrip()


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (current) context, as kubectl would use it."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    file = Path(path) if path else Path.home() / ".kube" / "config"
    try:
        config = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    wanted = context or config.get("current-context")
    for entry in config.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == wanted:
            namespace = (entry.get("context") or {}).get("namespace")
            return str(namespace) if namespace else "default"
    return "default"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl topos", description="The Topos coordinator's view of the cluster."
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument(
        "--topos-namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the coordinator's Service (default {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--service",
        default=DEFAULT_SERVICE,
        help=f"scheme:name:port of the Service to proxy to (default {DEFAULT_SERVICE})",
    )
    parser.add_argument(
        "--coordinator",
        metavar="URL",
        default=os.environ.get("TOPOS_COORDINATOR") or None,
        help="talk to this coordinator URL directly instead ($TOPOS_COORDINATOR, which "
        "`topos devcluster up --coordinator` exports)",
    )
    parser.add_argument("--token", help="bearer token for --coordinator (or $TOPOS_TOKEN)")
    parser.add_argument("--ca-file", help="CA bundle to verify an https --coordinator")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    nodes = sub.add_parser("nodes", help="GPUs free per node, per NUMA node, MIG free")
    nodes.set_defaults(run=cmd_nodes)
    gpus = sub.add_parser("gpus", help="each GPU, how it is used, its holders and their shares")
    gpus.add_argument("node", nargs="?", help="only this node")
    gpus.set_defaults(run=cmd_gpus)
    explain = sub.add_parser("explain", help="where a pod went and why (or why not)")
    explain.add_argument("pod", metavar="pod/NAME")
    explain.add_argument("-n", "--namespace", help="the pod's namespace (default: context's)")
    explain.set_defaults(run=cmd_explain)
    mismatches = sub.add_parser(
        "mismatches", help="pods the node gave other GPUs than Topos assigned (device plugin)"
    )
    mismatches.add_argument("-n", "--namespace", help="only pods in this namespace")
    mismatches.set_defaults(run=cmd_mismatches)
    shares = sub.add_parser(
        "dra-shares", help="claims sharing a node's DRA GPUs (consumable capacity), and how much"
    )
    shares.add_argument("node", metavar="NODE")
    shares.set_defaults(run=cmd_dra_shares)
    whatif = sub.add_parser(
        "whatif",
        help="would this manifest fit now, where, why not, and what would make it fit "
        f"(exit status {DOES_NOT_FIT} when it does not fit)",
    )
    whatif.add_argument("-f", "--filename", required=True, help="manifest file (- for stdin)")
    whatif.add_argument("-n", "--namespace", help="for documents naming none (default: context's)")
    whatif.add_argument(
        "--budget",
        metavar="SECONDS",
        help="time for the suggestions (the coordinator's default: 1), or none for no limit",
    )
    whatif.set_defaults(run=cmd_whatif)
    gangs = sub.add_parser("gangs", help="gangs and how many members are placed")
    gangs.add_argument("-n", "--namespace", help="only gangs in this namespace")
    gangs.set_defaults(run=cmd_gangs)
    return parser


async def _transport(args: argparse.Namespace) -> Transport:
    if args.coordinator:
        token = args.token or os.environ.get("TOPOS_TOKEN")
        return DirectTransport(args.coordinator, token=token, ca_file=args.ca_file)
    try:
        client = await KubeClient.connect(args.kubeconfig, context=args.context)
    except KubeError as exc:
        raise PluginError(str(exc)) from exc
    return ProxyTransport(client, namespace=args.topos_namespace, service=args.service)


async def run(args: argparse.Namespace) -> str:
    transport = await _transport(args)
    try:
        output: str = await args.run(transport, args)
        return output
    finally:
        await transport.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(asyncio.run(run(args)))
    except PluginError as exc:
        if args.debug:
            raise
        print(f"kubectl-topos: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return int(getattr(args, "exit_code", 0))


if __name__ == "__main__":
    sys.exit(main())
