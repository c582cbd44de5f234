"""``POST /v1/whatif``: where would this manifest's pods go now, why not, and what would make
them fit — answered on a copy of the scheduler's state, changing nothing (docs/whatif.md).

The route only decodes and renders: the answer is
:meth:`coordinator.engine.whatif.service.WhatIf.answer_predicted` (``answer`` with the predicted
start), which the app puts in :data:`WHATIF` while the scheduler runs (the Kueue admission
check calls :meth:`~coordinator.engine.whatif.service.WhatIf.answer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec
import yaml
from aiohttp import web

from coordinator.api.errors import ApiError, bad_request
from coordinator.api.render import respond
from coordinator.api.routing import QueryParam, Route
from coordinator.engine.whatif.model import WhatIfAnswer, WhatIfRequest
from coordinator.engine.whatif.service import DEFAULT_BUDGET_S, WhatIf, WhatIfError

__all__ = ["ROUTES", "WHATIF", "WhatIfSlot"]


@dataclass(slots=True)
class WhatIfSlot:
    """Holds the what-if of the running scheduler (``None`` while none runs)."""

    whatif: WhatIf | None = None


WHATIF = web.AppKey("whatif", WhatIfSlot)

_DECODER: Final = msgspec.json.Decoder(WhatIfRequest)
_YAML: Final = ("application/yaml", "application/x-yaml", "text/yaml")


def _budget(raw: str | None) -> float | None:
    """``?budget_s=`` for a YAML body: seconds, ``none`` for no limit."""
    if raw is None:
        return DEFAULT_BUDGET_S
    if raw == "none":
        return None
    try:
        return float(raw)
    except ValueError:
        raise bad_request(
            f"query parameter budget_s={raw[:20]!r} must be seconds or none"
        ) from None


def _request(body: bytes, content_type: str, budget: str | None) -> WhatIfRequest:
    if content_type in _YAML:
        try:
            docs: list[Any] = [d for d in yaml.safe_load_all(body) if d is not None]
        except yaml.YAMLError as exc:
            raise bad_request(f"body is not YAML: {exc}") from None
        return WhatIfRequest(documents=docs, budget_s=_budget(budget))
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
    doc = _request(await request.read(), request.content_type, request.query.get("budget_s"))
    if doc.budget_s is not None and not 0 <= doc.budget_s <= 600:
        raise bad_request(f"budget_s: must be between 0 and 600 seconds, not {doc.budget_s!r}")
    try:
        answer = await slot.whatif.answer_predicted(
            doc.documents, suggest=doc.suggest, budget_s=doc.budget_s
        )
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
        query=(
            QueryParam(
                "budget_s",
                "with a YAML body: seconds for the suggestions (default 1), or none",
                {"type": "string"},
            ),
        ),
        errors={
            400: "a document that cannot be expanded or parsed (names the key and value)",
            503: "the scheduler is not running",
        },
    ),
)
