#!/usr/bin/env python3
"""A loopback TCP forwarder into another network namespace: how the host reaches the node stack's servers.

    python3 dev/stack/forward.py --netns-pid PID LISTEN_PORT:UPSTREAM_HOST:UPSTREAM_PORT [...]

Listens on 127.0.0.1:LISTEN_PORT in the namespace it is started in, then enters the network namespace of
PID; each accepted connection is relayed to UPSTREAM_HOST:UPSTREAM_PORT, a socket opened there. A socket
keeps the namespace it was created in, so the listeners stay on the host's loopback while every upstream
lives in the node's namespace: the host's routes, addresses and iptables never change. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netns

__all__ = ["main"]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


def _handler(host: str, port: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    return handle


async def _serve(listeners: list[tuple[socket.socket, str, int]]) -> None:
    servers = [await asyncio.start_server(_handler(host, port), sock=sock) for sock, host, port in listeners]
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--netns-pid", type=int, required=True)
    parser.add_argument("routes", nargs="+", metavar="LISTEN_PORT:UPSTREAM_HOST:UPSTREAM_PORT")
    args = parser.parse_args(argv)
    listeners = []
    for route in args.routes:
        listen, host, port = route.split(":")
        sock = socket.create_server(("127.0.0.1", int(listen)), reuse_port=False)
        listeners.append((sock, host, int(port)))
    netns.setns(f"/proc/{args.netns_pid}/ns/net", netns.CLONE_NEWNET)  # after the listeners: they stay here
    asyncio.run(_serve(listeners))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
