"""Import only the parts of kubernetes_asyncio that ``common.kube`` uses.

``import kubernetes_asyncio`` (and ``kubernetes_asyncio.client``) eagerly imports every generated
API class and every model — about 35 MiB of resident memory — although ``common.kube`` only uses
``Configuration``, ``ApiClient.call_api`` with raw responses, and the kubeconfig loader. For the
node agent, which runs on every GPU node, that is half its memory budget (target < 80 MiB RSS).

``install()`` registers the two package modules (``kubernetes_asyncio`` and
``kubernetes_asyncio.client``, plus ``kubernetes_asyncio.client.models``) as thin packages whose
``__init__`` is not run; their submodules import normally from the same directories. Anything else
asked of them later (``kubernetes_asyncio.client.CoreV1Api``, ``….models.V1Pod``,
``kubernetes_asyncio.watch``) is imported on first use by a module ``__getattr__``, so code that
expects the full package still works, it just pays when it asks. Nothing is installed when the
library was already imported the ordinary way.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

_TOP = "kubernetes_asyncio"
_CLIENT = "kubernetes_asyncio.client"
_MODELS = "kubernetes_asyncio.client.models"
_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _snake(name: str) -> str:
    """``CoreV1Api`` → ``core_v1_api``, ``V1Pod`` → ``v1_pod``."""
    return _SNAKE.sub("_", name).lower()


def _package(name: str, path: Path, getattr_: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    module.__package__ = name
    module.__file__ = str(path / "__init__.py")
    module.__getattr__ = getattr_  # type: ignore[method-assign]
    return module


def _top_getattr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return importlib.import_module(f"{_TOP}.{name}")


def _client_getattr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    candidates = [f"{_CLIENT}.{_snake(name)}"]
    if name.endswith("Api"):
        candidates.insert(0, f"{_CLIENT}.api.{_snake(name)}")
    else:
        candidates.insert(0, f"{_MODELS}.{_snake(name)}")
    for module_name in candidates:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        return getattr(module, name, module)
    raise AttributeError(f"module {_CLIENT!r} has no attribute {name!r}")


def _models_getattr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        module = importlib.import_module(f"{_MODELS}.{_snake(name)}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {_MODELS!r} has no attribute {name!r}") from None
    return getattr(module, name)


def install() -> bool:
    """Register the thin packages; ``False`` when kubernetes_asyncio was already imported."""
    if _TOP in sys.modules:
        return False
    spec = importlib.util.find_spec(_TOP)
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    top = _package(_TOP, root, _top_getattr)
    client = _package(_CLIENT, root / "client", _client_getattr)
    models = _package(_MODELS, root / "client" / "models", _models_getattr)
    sys.modules[_TOP] = top
    sys.modules[_CLIENT] = client
    sys.modules[_MODELS] = models
    top.client = client  # type: ignore[attr-defined]
    client.models = models  # type: ignore[attr-defined]
    # what common.kube and the kubeconfig loader import by name from the package
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    client.ApiClient = ApiClient  # type: ignore[attr-defined]
    client.Configuration = Configuration  # type: ignore[attr-defined]
    return True


install()  # on import: `common.kube` imports this module before anything else of its own
