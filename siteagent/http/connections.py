"""How many connections one peer may hold at once.

Each open connection holds a file descriptor of the service; a peer that opens many and keeps
them open (a request head sent a line every few seconds, see :mod:`.limits`) would otherwise
use up the process's descriptors (systemd's default is 1,024) and keep every other buyer out.
So each address may hold at most ``api.max_connections_per_address`` at once; one more is
closed as it is made, before anything is read from it. A buyer needs one connection per site
(a bank as many as an agent's booking threads): the default leaves room for a proxy or a NAT
that puts several buyers behind one address.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Optional, Type, cast

log = logging.getLogger("siteagent.serving")


def capped_per_address(protocol: Type[asyncio.Protocol], per_address: int) -> Type[Any]:
    """``protocol`` (uvicorn's HTTP protocol class) with at most ``per_address`` connections
    from one address open at once (the rest dropped as they are made, and logged once per
    burst)."""
    open_from: Counter[str] = Counter()

    class Capped(protocol):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            self._address: Optional[str] = str(peer[0]) if peer else None
            if self._address is not None and open_from[self._address] >= per_address:
                if open_from[self._address] == per_address:
                    log.warning(
                        "%s holds %d connections, the most one address may: dropping more",
                        self._address,
                        per_address,
                    )
                open_from[self._address] += 1  # counted until lost, so the warning is once
                self._dropped = True
                cast(asyncio.Transport, transport).abort()  # uvloop's is no asyncio subclass
                return
            self._dropped = False
            if self._address is not None:
                open_from[self._address] += 1
            super().connection_made(transport)

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._address is not None:
                open_from[self._address] -= 1
                if open_from[self._address] <= 0:
                    del open_from[self._address]
            if not self._dropped:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._dropped:
                super().data_received(data)

    Capped.__name__ = Capped.__qualname__ = f"Capped{protocol.__name__}"
    return Capped
