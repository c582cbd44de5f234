"""The coordinator's HTTP API (docs/design.md §5): aiohttp routes, one module per topic.

A topic module exposes ``ROUTES``, a tuple of :class:`~coordinator.api.routing.Route`, each a
handler plus what the OpenAPI document says about it; :func:`~coordinator.app.web.build_app`
mounts them. To add routes, write a module with its ``ROUTES`` and pass them as ``extra_routes``.
"""
