"""A TCP proxy we control, between a node and PostgreSQL or between a client and a node.

Every proxy runs on one shared event loop in a thread of its own (`ProxyLoop`), so a test that
is busy, or blocked in a subprocess call, never stalls the traffic it is not faulting. Modes:

- ``pass``: bytes flow both ways (optionally each chunk held `delay` seconds first);
- ``blackhole``: new connections are accepted and never forwarded or answered, and bytes on
  open connections are held back in both directions (no reset, no FIN): what a partition
  without a reset looks like to both sides;
- ``refuse``: new connections are closed at once (a node that is down);
- ``cut()``: every open connection is closed now (both sides see the connection end);
- ``swallow_replies(n)``: the next n connections that send a request after this call get it
  forwarded, but the server's answer is dropped and the connection closed on both sides — the
  request reached the server (a COMMIT may have landed) but the client never hears the answer.
  Connections that only listen (a LISTEN connection hearing NOTIFYs) are not affected.
- ``swallow_commits(n, then)``: PostgreSQL-aware. The proxy frames the server's messages and
  drops the next n answers to a write (the CommandComplete answering a request that
  carried the journal's INSERT, the prepared append `state_append`, or a COMMIT), closing that connection: exactly "the commit landed, the node never heard
  it". ``then="refuse"`` also closes every other connection and refuses new ones afterwards
  (PostgreSQL unreachable right after the commit) until healed.
- ``blackhole_after(pattern)``: the first request bytes containing `pattern` are forwarded,
  then the proxy turns into a black hole: a partition that starts in the middle of a
  transaction (after its row locks were taken, before its COMMIT).

Only 127.0.0.1 is ever listened on or connected to.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Optional


class ProxyLoop:
    """One event loop in a daemon thread, shared by every proxy of a test run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="proxy-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro, timeout: float = 10.0):
        future: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


class Proxy:
    """Listens on 127.0.0.1 (a free port) and forwards to `target_port` on 127.0.0.1."""

    def __init__(self, loop: ProxyLoop, target_port: int, name: str = "proxy", postgres: bool = False) -> None:
        self.loop = loop
        self.postgres = postgres  # frame the server's bytes as PostgreSQL messages (swallow_commits)
        self.target_port = target_port
        self.name = name
        self.mode = "pass"
        self.delay = 0.0
        self.swallow = 0
        self.swallowed = 0
        self.commits = 0
        self.commits_then = "pass"
        self._writing: set = set()
        self.trigger: Optional[bytes] = None
        self._targets: set = set()
        self.port: Optional[int] = None
        self.connections: set = set()
        self.accepted = 0
        self.server: Optional[asyncio.base_events.Server] = None
        self._resume: Optional[asyncio.Event] = None

    # -- control, from any thread ----------------------------------------------------------------

    def start(self) -> "Proxy":
        self.loop.call(self._start())
        return self

    def set(self, mode: str = "pass", delay: float = 0.0) -> None:
        assert mode in ("pass", "blackhole", "refuse"), mode
        self.loop.call(self._set(mode, delay))

    def heal(self) -> None:
        self.set("pass", 0.0)

    def cut(self) -> int:
        """Closes every open connection; returns how many."""
        return self.loop.call(self._cut())

    def swallow_replies(self, n: int = 1) -> None:
        self.loop.call(self._swallow(n))

    def swallow_commits(self, n: int = 1, then: str = "pass") -> None:
        async def arm():
            self.commits = n
            self.commits_then = then
        self.loop.call(arm())

    def blackhole_after(self, pattern: bytes) -> None:
        async def arm():
            self.trigger = pattern
        self.loop.call(arm())

    def close(self) -> None:
        try:
            self.loop.call(self._close())
        except Exception:
            pass

    # -- inside the loop ---------------------------------------------------------------------------

    async def _start(self) -> None:
        self._resume = asyncio.Event()
        self._resume.set()
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _set(self, mode: str, delay: float) -> None:
        self.mode = mode
        self.delay = delay
        if mode == "blackhole":
            self._resume.clear()
        else:
            self._resume.set()

    async def _swallow(self, n: int) -> None:
        self.swallow = n

    async def _cut(self) -> int:
        pairs = list(self.connections)
        for pair in pairs:
            for writer in pair:
                _abort(writer)
        self.connections.clear()
        return len(pairs)

    async def _close(self) -> None:
        if self.server is not None:
            self.server.close()
        await self._cut()
        self._resume.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "refuse":
            _abort(writer)
            return
        # A black hole accepts and then waits: nothing is forwarded until healed (or cut).
        self.connections.add((writer,))
        await self._resume.wait()
        self.connections.discard((writer,))
        if writer.is_closing():
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            _abort(writer)
            return
        pair = (writer, up_writer)
        self.connections.add(pair)
        await asyncio.gather(
            self._pump(reader, up_writer, pair, from_server=False),
            self._pump(up_reader, writer, pair, from_server=True),
            return_exceptions=True,
        )
        self.connections.discard(pair)

    async def _pump(self, reader, writer, pair, from_server: bool) -> None:
        pending = b""   # server bytes of a PostgreSQL message not yet complete (framing)
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if not from_server and self.postgres and (b"INSERT INTO state_changes" in data or b"state_append" in data or b"COMMIT" in data):
                    self._writing.add(id(pair))
                if from_server and self.postgres:
                    data, pending = _complete_messages(pending + data)
                    if not data:
                        continue
                    done = id(pair) in self._writing and _has_message(data, b"C")
                    if done:
                        self._writing.discard(id(pair))
                    if self.commits > 0 and done:
                        self.commits -= 1
                        self.swallowed += 1
                        for w in pair:
                            _abort(w)
                        if self.commits_then == "refuse":
                            self.mode = "refuse"
                            await self._cut()
                        return
                await self._resume.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                if not from_server and self.swallow > 0 and id(pair) not in self._targets:
                    self.swallow -= 1
                    self._targets.add(id(pair))
                if from_server and id(pair) in self._targets:
                    # The request reached the server; its answer never reaches the client.
                    self._targets.discard(id(pair))
                    self.swallowed += 1
                    for w in pair:
                        _abort(w)
                    return
                writer.write(data)
                await writer.drain()
                if not from_server and self.trigger and self.trigger in data:
                    self.trigger = None
                    self.mode = "blackhole"
                    self._resume.clear()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in pair:
                _abort(w)


def _complete_messages(buf: bytes):
    """Splits PostgreSQL backend bytes into (whole messages, the incomplete rest)."""
    i = 0
    while len(buf) - i >= 5:
        length = int.from_bytes(buf[i + 1:i + 5], "big")
        if len(buf) - i < 1 + length:
            break
        i += 1 + length
    return buf[:i], buf[i:]


def _has_message(messages: bytes, kind: bytes) -> bool:
    i = 0
    while i + 5 <= len(messages):
        if messages[i:i + 1] == kind:
            return True
        i += 1 + int.from_bytes(messages[i + 1:i + 5], "big")
    return False


def _abort(writer: asyncio.StreamWriter) -> None:
    try:
        transport = writer.transport
        if not transport.is_closing():
            transport.abort()
    except Exception:
        pass
