"""The objects a controller's module asks to install, read from its files: CRDs, other objects,
and webhook configurations made to reach a manager on loopback.

A webhook configuration in a module names an in-cluster Service (``clientConfig.service``); the
test control plane has no Service network, so each webhook's ``clientConfig`` becomes
``url: https://127.0.0.1:<port><service path>`` with ``caBundle`` the controller's CA. The
module's kustomize patches (JSON patches, e.g. JobSet's and LWS's pod webhooks narrowed to their
own pods by an ``objectSelector``), the inline strategic-merge patches of its kustomization
(Kueue's namespaceSelectors) and ``namePrefix`` are applied as kustomize would. A CRD the module
gives a conversion webhook (kubebuilder's ``webhook_in_<plural>.yaml`` patches, Kueue's
v1beta1 ⇄ v1beta2) gets it pointed at the same loopback URL (path ``/convert``) and CA.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from devcluster.crds import YAML_LOADER
from devcluster.workloads.catalog import Controller, Patch, Webhooks

Document = dict[str, Any]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class ManifestError(Exception):
    """A module file is unreadable or not what the catalog says; the message names it."""


def documents(path: Path) -> list[Document]:
    """The YAML documents of a file, or of every ``*.yaml`` in a directory (name order) but its
    ``kustomization.yaml``."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.yaml") if p.name != "kustomization.yaml")
    else:
        files = [path]
    found: list[Document] = []
    for file in files:
        try:
            loaded = [d for d in yaml.load_all(file.read_text(), Loader=YAML_LOADER) if d]
        except (OSError, yaml.YAMLError) as exc:
            raise ManifestError(f"{file}: {exc}") from exc
        for document in loaded:
            if not isinstance(document, dict) or "kind" not in document:
                raise ManifestError(f"{file}: a document without a kind")
            found.append(document)
    return found


def crds(
    controller: Controller, root: Path, *, port: int | None = None, ca: bytes | None = None
) -> list[Document]:
    """The controller's CRDs; with ``port`` and ``ca``, those with a conversion patch get their
    conversion webhook at ``https://127.0.0.1:<port>`` trusting ``ca``."""
    found = [d for relative in controller.crds for d in documents(root / relative)]
    for document in found:
        if document["kind"] != "CustomResourceDefinition":
            raise ManifestError(
                f"expected CustomResourceDefinitions in {', '.join(controller.crds)}, "
                f"got {document['kind']}"
            )
    if port is None or ca is None:
        return found
    by_name = {str(d["metadata"]["name"]): d for d in found}
    for relative in controller.conversion:
        for patch in documents(root / relative):
            name = str((patch.get("metadata") or {}).get("name"))
            conversion = (patch.get("spec") or {}).get("conversion")
            if name not in by_name or not isinstance(conversion, dict):
                raise ManifestError(
                    f"{relative}: no spec.conversion for a CRD of {controller.name} "
                    f"(names {name!r})"
                )
            conversion = copy.deepcopy(conversion)
            webhook = conversion.setdefault("webhook", {})
            webhook["clientConfig"] = _client_config(webhook.get("clientConfig"), port, ca)
            by_name[name]["spec"]["conversion"] = conversion
    return found


def objects(controller: Controller, root: Path) -> list[Document]:
    return [d for relative in controller.objects for d in documents(root / relative)]


def webhook_configurations(
    controller: Controller, root: Path, *, port: int, ca: bytes
) -> list[Document]:
    """The controller's webhook configurations, patched, renamed, and pointed at
    ``https://127.0.0.1:<port>`` with ``ca`` (PEM) as the trusted CA."""
    found: list[Document] = []
    for webhooks in controller.webhooks:
        found += [_loopback(d, port=port, ca=ca) for d in _patched(webhooks, root)]
    return found


def _patched(webhooks: Webhooks, root: Path) -> list[Document]:
    found = documents(root / webhooks.path)
    inline = _inline_patches(root, webhooks.kustomization) if webhooks.kustomization else []
    for document in found:
        if document["kind"] not in WEBHOOK_KINDS:
            raise ManifestError(f"{webhooks.path}: unexpected {document['kind']}")
        for merge in inline:
            _merge_webhooks(document, merge)
        for patch in webhooks.patches:
            if _targets(patch, document):
                operations = yaml.safe_load((root / patch.path).read_text())
                try:
                    json_patch(document, operations)
                except (KeyError, IndexError, ValueError, TypeError) as exc:
                    raise ManifestError(f"{patch.path}: {exc}") from exc
        document["metadata"]["name"] = webhooks.name_prefix + document["metadata"]["name"]
    return found


def _inline_patches(root: Path, kustomization: str) -> list[Document]:
    """The kustomization's inline ``patches: [{patch: <yaml>}]`` documents."""
    try:
        loaded = yaml.safe_load((root / kustomization).read_text()) or {}
        patches = [yaml.safe_load(p["patch"]) for p in loaded.get("patches") or [] if "patch" in p]
    except (OSError, yaml.YAMLError, TypeError) as exc:
        raise ManifestError(f"{kustomization}: {exc}") from exc
    for patch in patches:
        if not isinstance(patch, dict) or patch.get("kind") not in WEBHOOK_KINDS:
            raise ManifestError(f"{kustomization}: an inline patch of no webhook configuration")
    return patches


def _merge_webhooks(document: Document, patch: Document) -> None:
    """Strategic merge of ``patch`` into ``document`` as kustomize does for webhook lists:
    the configuration by kind and name, each webhook by name, its fields replaced."""
    if patch["kind"] != document["kind"]:
        return
    if (patch.get("metadata") or {}).get("name") != document["metadata"]["name"]:
        return
    webhooks = {w.get("name"): w for w in document.get("webhooks") or []}
    for change in patch.get("webhooks") or []:
        target = webhooks.get(change.get("name"))
        if target is None:
            raise ManifestError(
                f"{document['kind']} {document['metadata']['name']}: a patch names webhook "
                f"{change.get('name')!r}, which it does not have"
            )
        target.update(copy.deepcopy(change))


def _targets(patch: Patch, document: Document) -> bool:
    if document["kind"] != patch.kind:
        return False
    return patch.name is None or document["metadata"]["name"] == patch.name


def _loopback(document: Document, *, port: int, ca: bytes) -> Document:
    result = copy.deepcopy(document)
    for webhook in result.get("webhooks") or []:
        webhook["clientConfig"] = _client_config(webhook.get("clientConfig"), port, ca)
    return result


def _client_config(client: Any, port: int, ca: bytes) -> dict[str, str]:
    """A Service ``clientConfig`` as a loopback URL (the Service's path) with ``ca``."""
    path = ((client or {}).get("service") or {}).get("path", "/")
    return {
        "url": f"https://127.0.0.1:{port}{path}",
        "caBundle": base64.b64encode(ca).decode("ascii"),
    }


def json_patch(document: Any, operations: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 ``add``/``replace``/``remove`` operations in place (what kustomize's
    patches in these modules use)."""
    for operation in operations:
        op, pointer = operation["op"], operation["path"]
        parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
        if not parts:
            raise ValueError(f"cannot {op} the whole document")
        parent = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op in ("add", "replace"):
            value = copy.deepcopy(operation["value"])
            if isinstance(parent, list):
                if op == "add" and last == "-":
                    parent.append(value)
                elif op == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:
                if op == "replace" and last not in parent:
                    raise KeyError(f"{pointer}: nothing to replace")
                parent[last] = value
        elif op == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
        else:
            raise ValueError(f"unsupported JSON patch op {op!r} at {pointer}")
