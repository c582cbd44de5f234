"""``POST /v1/whatif``: where would this manifest's pods go now, why not, and what would make
them fit — answered on a copy of the scheduler's state, changing nothing (docs/whatif.md).

The route only decodes and renders: the answer is
:meth:`coordinator.engine.whatif.service.WhatIf.answer`, which the app puts in :data:`WHATIF`
while the scheduler runs (the Kueue admission check calls the same function).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec
import yaml
from aiohttp import web

from coordinator.api.errors import ApiError, bad_request
from coordinator.api.render import respond
from coordinator.api.routing import Route
from coordinator.engine.whatif.model import WhatIfAnswer, WhatIfRequest
from coordinator.engine.whatif.service import WhatIf, WhatIfError

__all__ = ["ROUTES", "WHATIF", "WhatIfSlot"]


@dataclass(slots=True)
class WhatIfSlot:
    """Holds the what-if of the running scheduler (``None`` while none runs)."""

    whatif: WhatIf | None = None


WHATIF = web.AppKey("whatif", WhatIfSlot)

_DECODER: Final = msgspec.json.Decoder(WhatIfRequest)
_YAML: Final = ("application/yaml", "application/x-yaml", "text/yaml")


def _request(body: bytes, content_type: str) -> WhatIfRequest:
    if content_type in _YAML:
        try:
            docs: list[Any] = [d for d in yaml.safe_load_all(body) if d is not None]
        except yaml.YAMLError as exc:
            raise bad_request(f"body is not YAML: {exc}") from None
        return WhatIfRequest(documents=docs)
    try:
        return _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        raise bad_request(f"invalid what-if request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"body is not JSON: {exc}") from None


async def whatif(request: web.Request) -> web.Response:
    slot = request.app.get(WHATIF)
    if slot is None or slot.whatif is None:
        raise ApiError(503, "unavailable", "the scheduler is not running")
    doc = _request(await request.read(), request.content_type)
    try:
        answer = slot.whatif.answer(doc.documents, suggest=doc.suggest)
    except WhatIfError as exc:
        raise bad_request(str(exc)) from None
    return respond(request, answer)


ROUTES = (
    Route(
        "POST",
        "/v1/whatif",
        whatif,
        "What-if: would this manifest (Pod, Job, JobSet, LeaderWorkerSet, PodGroup and pods, "
        "AgentPool) fit now, where, why not, and what would make it fit? Answered on a copy: "
        "nothing is queued, reserved or written. A YAML body (application/yaml) may be sent as is",
        "scheduling",
        response=WhatIfAnswer,
        request_body=WhatIfRequest,
        errors={
            400: "a document that cannot be expanded or parsed (names the key and value)",
            503: "the scheduler is not running",
        },
    ),
)
