"""Fetching region carbon intensities: an HTTP(S) URL or a file (tests, air-gapped clusters).

::

    source = IntensitySource("http://carbon.example/v1/intensity", timeout_s=5)
    state = await source.refresh()      # an Intensities: values, fetched_at, error, age
    readings.update(state.values)       # the scheduler's CarbonReadings

A timeout, a connection error, an HTTP status other than 200 or a body :func:`.parse_intensity`
refuses becomes ``state.error`` (one line); the previous good values are kept with their age.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from coordinator.neuronetes.decide.policy.carbon import Intensities, parse_intensity
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = ["IntensitySource"]


class IntensitySource:
    def __init__(
        self,
        location: str,
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not location:
            raise PolicyError("carbon intensity source: no URL or file given")
        if timeout_s <= 0:
            raise PolicyError(f"carbon intensity source: timeout must be above 0, not {timeout_s}")
        self.location = location
        self.timeout_s = timeout_s
        self.state = Intensities()
        self._clock = clock

    async def refresh(self) -> Intensities:
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await self._read()
            values = parse_intensity(body)
        except TimeoutError:
            self.state = self.state.failed(
                f"{self.location}: no answer within {self.timeout_s:g}s", self._clock()
            )
        except (OSError, aiohttp.ClientError, PolicyError) as exc:
            self.state = self.state.failed(f"{self.location}: {exc}", self._clock())
        else:
            self.state = self.state.ok(values, self._clock())
        return self.state

    async def _read(self) -> bytes:
        if not self.location.startswith(("http://", "https://")):
            return await asyncio.to_thread(Path(self.location).read_bytes)
        async with aiohttp.ClientSession() as session, session.get(self.location) as response:
            if response.status != 200:
                raise PolicyError(f"HTTP {response.status}")
            return await response.read()
