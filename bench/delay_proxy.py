"""A TCP proxy that delays what it forwards: wide-area round trips on one host.

The marketplace paper's Fig. 13 ran 5 of its 15 agents at other institutions (20-50 ms away);
this machine's kernel has no ``netem``, so ``python -m bench repro-ramp --part network`` puts
this proxy in front of those agents instead. Each route listens on a loopback port (a free
one unless given) and forwards to an agent; every chunk read in either direction is written
on after a one-way delay of half the route's round trip, each chunk's delay drawn with a
jitter (uniform, ± the given fraction) but never overtaking the chunk before it (TCP keeps
order). TLS passes through untouched: the buyer still talks to the agent itself (which must
name the proxy's port among its ``api.public_names``: requests are signed for it).

    python -m bench.delay_proxy --route 127.0.0.1:8443@35 --route 127.0.0.1:8444@0.5 \\
        [--jitter 0.1] [--seed 0]

prints one JSON line, ``{"ports": [listening port of each route, in order]}``, once every
route listens, then forwards until it is terminated (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

#: How much one read takes from a socket (bytes).
CHUNK = 65536


@dataclass(frozen=True)
class Route:
    """Forward loopback port ``listen`` (0: any free one) to ``host:port`` with ``rtt_ms`` of
    round trip added."""

    host: str
    port: int
    rtt_ms: float
    listen: int = 0

    @classmethod
    def parse(cls, text: str) -> Route:
        """``[LISTEN=]HOST:PORT@RTT_MS``."""
        try:
            listen, _, target = text.rpartition("=")
            target, rtt = target.rsplit("@", 1)
            host, port = target.rsplit(":", 1)
            route = cls(host, int(port), float(rtt), int(listen or 0))
        except ValueError:
            raise argparse.ArgumentTypeError(
                "a route is [LISTEN=]HOST:PORT@RTT_MS (e.g. 127.0.0.1:8443@35, or "
                f"9443=127.0.0.1:8443@35 to listen on port 9443), got {text!r}"
            ) from None
        if route.rtt_ms < 0:
            raise argparse.ArgumentTypeError(f"the round trip must be >= 0 ms, got {text!r}")
        return route


class Delay:
    """One direction's one-way delays: half the round trip, ± ``jitter`` of it, drawn from
    ``rng`` (seeded by the caller, so that a run can be repeated)."""

    def __init__(self, rtt_ms: float, jitter: float, rng: random.Random) -> None:
        self.one_way_s = rtt_ms / 2000.0
        self.jitter = jitter
        self.rng = rng

    def draw(self) -> float:
        spread = self.one_way_s * self.jitter
        return max(0.0, self.one_way_s + self.rng.uniform(-spread, spread))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy ``reader`` to ``writer``, each chunk after its delay, in order."""
    due: asyncio.Queue[Tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            at, data = await due.get()
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    sender = asyncio.ensure_future(send())
    last = 0.0
    try:
        while True:
            data = await reader.read(CHUNK)
            last = max(time.monotonic() + delay.draw(), last)
            due.put_nowait((last, data))
            if not data:
                break
        await sender
    except (OSError, asyncio.CancelledError):
        sender.cancel()
        raise
    finally:
        if not sender.done():
            sender.cancel()


async def _serve_route(route: Route, jitter: float, rng: random.Random) -> asyncio.AbstractServer:
    async def connected(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            agent_r, agent_w = await asyncio.open_connection(route.host, route.port)
        except OSError:
            client_w.close()
            return
        pumps = [
            asyncio.ensure_future(_pump(client_r, agent_w, Delay(route.rtt_ms, jitter, rng))),
            asyncio.ensure_future(_pump(agent_r, client_w, Delay(route.rtt_ms, jitter, rng))),
        ]
        try:
            await asyncio.gather(*pumps)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (client_w, agent_w):
                writer.close()

    return await asyncio.start_server(connected, "127.0.0.1", route.listen)


async def serve(routes: Sequence[Route], jitter: float, seed: int) -> None:
    """Listen for every route, say where (one JSON line on stdout), forward until stopped."""
    rng = random.Random(f"delay-proxy:{seed}")
    servers = [await _serve_route(route, jitter, rng) for route in routes]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    print(json.dumps({"ports": ports}), flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    for server in servers:
        server.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.delay_proxy", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--route",
        type=Route.parse,
        action="append",
        required=True,
        metavar="[LISTEN=]HOST:PORT@RTT_MS",
        help="forward loopback port LISTEN (default: a free one) to HOST:PORT with RTT_MS of "
        "round trip (repeatable)",
    )
    parser.add_argument(
        "--jitter", type=float, default=0.1, help="each delay varies by ± this fraction (0.1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the jitter draws (0)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.jitter <= 1.0:
        parser.error(f"--jitter must be in [0, 1], got {args.jitter}")
    routes: List[Route] = args.route
    asyncio.run(serve(routes, args.jitter, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
