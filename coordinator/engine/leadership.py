"""Whether this replica leads: what the scheduling loop and every leader-only writer (binds,
gang timeouts and recovery evictions, PodGroup status) ask before they act.

On Kubernetes the app gives the runtime its leader elector (``coordinator.app.election``);
alone (in memory, the simulator, election off) a replica always leads. A replica that stops
leading — it lost its Lease, or was paused past its renew deadline — stops scheduling before its
next cycle and waits in :meth:`Leadership.wait_until_leading` until it leads again.
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["ALWAYS", "Leadership"]


class Leadership(Protocol):
    def is_leader(self) -> bool:
        """True while this replica may write what only the leader writes."""
        ...

    async def wait_until_leading(self) -> None:
        """Return once :meth:`is_leader` holds (at once if it does)."""
        ...

    def why_not_leading(self) -> str:
        """Why :meth:`is_leader` is false, as this replica sees it (who holds the Lease, or that
        this replica's own renewals failed): what its logs say when it waits."""
        ...


class _Always:
    def is_leader(self) -> bool:
        return True

    async def wait_until_leading(self) -> None:
        return None

    def why_not_leading(self) -> str:
        return "it leads"


#: The leadership of a replica that runs alone.
ALWAYS: Final[Leadership] = _Always()
