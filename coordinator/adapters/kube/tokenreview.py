"""Bearer tokens checked by the API server's TokenReview, with a short cache in front.

Every request with a token would otherwise cost one TokenReview round-trip. :class:`CachingReviewer`
keeps each verdict for a few seconds (keyed by a SHA-256 of the token, never the token itself),
merges concurrent reviews of the same token into one call, and bounds its size. Accepted tokens are
cached for ``ttl_s``, rejected ones for the shorter ``negative_ttl_s`` so a token that just became
valid is not refused for long; a failed review (API server unreachable) is never cached.

Time is an injected ``clock`` (monotonic seconds) so expiry is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common.kube import KubeClient, KubeError
from coordinator.adapters.kube.identity import Identity

_log = logging.getLogger("topos.coordinator.app.auth")


class ReviewUnavailable(Exception):
    """The token could not be reviewed (API server unreachable, or refused our TokenReview)."""


@dataclass(frozen=True, slots=True)
class Review:
    """A TokenReview verdict: an identity, or why the token was not accepted."""

    identity: Identity | None
    error: str = ""

    @property
    def authenticated(self) -> bool:
        return self.identity is not None


class TokenReviewer(Protocol):
    async def review(self, token: str) -> Review:
        """The verdict on ``token``; raises ReviewUnavailable when no verdict could be had."""
        ...


def review_from_result(result: Mapping[str, Any], *, audiences: Sequence[str] = ()) -> Review:
    """A :class:`Review` from a TokenReview result (``common.kube``'s ``TokenReviewResult``).

    Anything but a clear "authenticated, with a user name" is a rejection. When ``audiences``
    were asked for, the server must have granted one of them.
    """
    if not isinstance(result, Mapping) or result.get("authenticated") is not True:
        error = result.get("error") if isinstance(result, Mapping) else None
        return Review(None, str(error or "token not authenticated"))
    username = result.get("username")
    if not isinstance(username, str) or not username:
        return Review(None, "token review returned no user")
    if audiences:
        granted = result.get("audiences")
        if not set(audiences) & set(granted if isinstance(granted, list) else []):
            return Review(None, "token not issued for this audience")
    extra_raw = result.get("extra")
    extra = {
        str(key): [str(v) for v in values]
        for key, values in (extra_raw.items() if isinstance(extra_raw, Mapping) else ())
        if isinstance(values, list)
    }
    groups = result.get("groups")
    return Review(
        Identity.from_review(
            username=username,
            uid=str(result.get("uid") or ""),
            groups=[str(g) for g in groups] if isinstance(groups, list) else [],
            extra=extra,
        )
    )


class KubeTokenReviewer:
    """Reviews tokens with the API server's TokenReview (needs ``tokenreviews create``)."""

    def __init__(self, client: KubeClient, *, audiences: Sequence[str] = ()) -> None:
        self._client = client
        self._audiences = list(audiences)

    async def review(self, token: str) -> Review:
        try:
            result = await self._client.review_token(token, audiences=self._audiences or None)
        except KubeError as exc:
            raise ReviewUnavailable(f"TokenReview failed: {exc}") from exc
        return review_from_result(result, audiences=self._audiences)


@dataclass(slots=True)
class _Entry:
    review: Review
    expires: float


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    reviews: int = 0
    """TokenReviews actually sent (misses merged into an in-flight review don't send one)."""


class CachingReviewer:
    """A :class:`TokenReviewer` that remembers verdicts briefly."""

    def __init__(
        self,
        inner: TokenReviewer,
        *,
        ttl_s: float = 10.0,
        negative_ttl_s: float = 2.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s < 0 or negative_ttl_s < 0 or max_entries < 1:
            raise ValueError("cache TTLs must be >= 0 and max_entries >= 1")
        self._inner = inner
        self._ttl = ttl_s
        self._negative_ttl = negative_ttl_s
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[Review]] = {}
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    async def review(self, token: str) -> Review:
        key = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None:
            if entry.expires > now:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return entry.review
            del self._entries[key]
        self.stats.misses += 1
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Review] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            self.stats.reviews += 1
            review = await self._inner.review(token)
        except BaseException as exc:
            shared = exc if isinstance(exc, Exception) else ReviewUnavailable("review cancelled")
            future.set_exception(shared)
            future.exception()  # mark retrieved: only the waiters re-raise it
            raise
        else:
            future.set_result(review)
            ttl = self._ttl if review.authenticated else self._negative_ttl
            if ttl > 0:
                self._entries[key] = _Entry(review, self._clock() + ttl)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            return review
        finally:
            del self._inflight[key]
