"""A route: the handler plus what ``/v1/openapi.json`` says about it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PATH_PARAM: Final = re.compile(r"\{(\w+)\}")
_ERROR_SCHEMA: Final = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
}


@dataclass(frozen=True, slots=True)
class QueryParam:
    name: str
    description: str
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    response: Any = None  # a msgspec-describable type for the 200 body; None: free-form
    response_type: str = "application/json"
    query: tuple[QueryParam, ...] = ()
    errors: Mapping[int, str] = field(default_factory=dict)
    request_body: Any = None  # a msgspec-describable type for the JSON body


def mount(app: web.Application, routes: Iterable[Route]) -> None:
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler)


def openapi_document(routes: Iterable[Route], *, title: str, version: str) -> dict[str, Any]:
    routes = list(routes)
    types = [r.response for r in routes if r.response is not None]
    types += [r.request_body for r in routes if r.request_body is not None]
    schemas, components = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}"
    )
    by_type = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        op: dict[str, Any] = {
            "summary": r.summary,
            "tags": [r.tag],
            "operationId": f"{r.method.lower()}_{r.handler.__name__}",
        }
        params: list[dict[str, Any]] = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in _PATH_PARAM.findall(r.path)
        ]
        params += [
            {
                "name": q.name,
                "in": "query",
                "required": False,
                "description": q.description,
                "schema": dict(q.schema),
            }
            for q in r.query
        ]
        if params:
            op["parameters"] = params
        ok: dict[str, Any] = {"description": "OK"}
        if r.response is not None:
            ok["content"] = {
                "application/json": {"schema": by_type[r.response]},
                "application/msgpack": {"schema": by_type[r.response]},
            }
        elif r.response_type != "application/json":
            ok["content"] = {r.response_type: {}}
        responses: dict[str, Any] = {"200": ok}
        for status, text in sorted(r.errors.items()):
            responses[str(status)] = {
                "description": text,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        op["responses"] = responses
        if r.request_body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": by_type[r.request_body]}},
            }
        paths.setdefault(r.path, {})[r.method.lower()] = op
    components["Error"] = _ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
    }
