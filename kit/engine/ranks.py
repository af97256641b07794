"""Ranks of a demo engine that spans nodes (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``): the
life cycle sglang's multi-node servers have, without sharded compute.

Rank 0 serves the API and listens on the rendezvous port; every other rank connects to it, says
``kit-rank R N`` and stays connected. Rank 0 answers ``/health`` only once all N-1 have joined, and any rank
whose peer connection drops exits with status 1, as a NCCL failure takes the other ranks down: killing one
rank ends the server. A rank told to stop (SIGTERM) says ``bye`` first: then rank 0 stops too, with
status 0. Ranks above 0 hold no weights and serve no HTTP (the demo's compute stays on rank 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

log = logging.getLogger("kit.engine.ranks")

HELLO = "kit-rank"
JOIN_RETRY_S = 0.2
HELLO_TIMEOUT_S = 10.0


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--dist-init-addr {addr!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class Rendezvous:
    """Rank 0's side: waits for every other rank, then watches their connections."""

    def __init__(self, nnodes: int) -> None:
        self.nnodes = nnodes
        self.joined: set[int] = set()
        self.ready = asyncio.Event()
        self.failed = asyncio.Event()  # a rank left (its connection closed without a bye)
        self.ended = asyncio.Event()  # a rank left: with a bye (it was stopped) or without
        self.reason = ""
        self._server: asyncio.Server | None = None

    async def start(self, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host=None, port=port)  # every interface
        log.info("rank 0: rendezvous on port %d, waiting for %d rank(s)", port, self.nnodes - 1)
        if self.nnodes == 1:
            self.ready.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S)).decode("ascii", "replace").split()
        except (TimeoutError, ConnectionError):
            writer.close()
            return
        if len(line) != 3 or line[0] != HELLO or line[2] != str(self.nnodes) or not line[1].isdigit():
            log.warning("rank 0: refused a peer that said %r", " ".join(line))
            writer.close()
            return
        rank = int(line[1])
        if not 0 < rank < self.nnodes or rank in self.joined:
            log.warning("rank 0: refused rank %d (expected 1..%d, once each)", rank, self.nnodes - 1)
            writer.close()
            return
        self.joined.add(rank)
        writer.write(b"ok\n")
        await writer.drain()
        log.info("rank 0: rank %d joined (%d of %d)", rank, len(self.joined), self.nnodes - 1)
        if len(self.joined) == self.nnodes - 1:
            self.ready.set()
        said = b""
        try:
            said = await reader.read()  # until the peer's connection closes
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            return  # the server is shutting down: not a rank leaving
        if said.strip() == b"bye":
            log.info("rank 0: rank %d was stopped: stopping", rank)
        else:
            self.reason = f"rank {rank} left (its connection closed)"
            log.error("rank 0: %s: stopping", self.reason)
            self.failed.set()
        self.ended.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


async def _join(host: str, port: int, rank: int,
                nnodes: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """One try: connect, say who this rank is, and get rank 0's ok (a half-made connection is closed: rank 0
    would otherwise count it as joined)."""
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"{HELLO} {rank} {nnodes}\n".encode())
        await writer.drain()
        if (await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S)).strip() == b"ok":
            return reader, writer
    except (OSError, TimeoutError):
        pass
    if writer is not None:
        writer.close()
    return None


async def follow(addr: str, rank: int, nnodes: int, stop: asyncio.Event, deadline_s: float = 600.0) -> int:
    """A rank above 0: join rank 0 (retrying until it listens), then stay until SIGTERM (exit 0) or until
    rank 0's connection closes (exit 1)."""
    host, port = parse_addr(addr)
    end = time.monotonic() + deadline_s
    while True:
        joined = await _join(host, port, rank, nnodes)
        if joined is not None:
            reader, writer = joined
            break
        if stop.is_set():
            return 0
        if time.monotonic() > end:
            log.error("rank %d: rank 0 at %s did not answer within %.0f s", rank, addr, deadline_s)
            return 1
        await asyncio.sleep(JOIN_RETRY_S)
    log.info("rank %d of %d: joined rank 0 at %s", rank, nnodes, addr)
    gone = asyncio.ensure_future(reader.read())
    stopped = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({gone, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stopped in done:
        gone.cancel()
        with contextlib.suppress(OSError):
            writer.write(b"bye\n")
            await writer.drain()
        writer.close()
        log.info("rank %d: stopping", rank)
        return 0
    writer.close()
    stopped.cancel()
    log.error("rank %d: rank 0 left (its connection closed): stopping", rank)
    return 1
