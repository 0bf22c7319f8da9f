"""A small HTTP/1.1 client on asyncio streams: one connection per request, a hard deadline
per request, and server-sent event streams read chunk by chunk. Written here (not aiohttp) so
that a timeout, a reset and a half-read reply are each seen exactly as they happen."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Optional


class Timeout(Exception):
    pass


class Broken(Exception):
    """The connection failed or ended before a whole reply was read."""


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    def json(self):
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def code(self) -> Optional[str]:
        j = self.json()
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return j["error"].get("code")
        return None


async def _read_head(reader: asyncio.StreamReader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def _read_body(reader, headers, method) -> bytes:
    if method == "HEAD":
        return b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


def _encode(host, port, method, path, headers, body: Optional[bytes]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def request(port: int, method: str, path: str, headers: Optional[dict] = None,
                  body=None, timeout: float = 10.0, host: str = "127.0.0.1") -> Response:
    """One request on a fresh connection. Raises Timeout or Broken."""
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
    writer = None

    async def go():
        nonlocal writer
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        writer.write(_encode(host, port, method, path, headers, body))
        await writer.drain()
        status, hdrs = await _read_head(reader)
        data = await _read_body(reader, hdrs, method)
        return Response(status, hdrs, data)

    try:
        return await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        raise Timeout(f"{method} {path} on :{port}: no reply within {timeout}s") from None
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as e:
        raise Broken(f"{method} {path} on :{port}: {type(e).__name__}: {e}") from None
    finally:
        if writer is not None:
            writer.transport.abort()


@dataclass
class Event:
    id: Optional[int]
    event: str
    data: Optional[dict]
    at: float


@dataclass
class EventStream:
    """One SSE connection, read in a task of its own until it ends or is closed."""

    port: int
    path: str
    headers: dict
    name: str = ""
    status: Optional[int] = None
    events: list = field(default_factory=list)
    ended: Optional[float] = None
    error: Optional[str] = None
    opened: float = field(default_factory=time.monotonic)
    _task: Optional[asyncio.Task] = None
    _writer: Optional[asyncio.StreamWriter] = None
    _ready: Optional[asyncio.Event] = None

    async def open(self, timeout: float = 10.0) -> "EventStream":
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            self.close()
            raise Timeout(f"stream {self.path} on :{self.port}: no first event within {timeout}s") from None
        return self

    async def _run(self) -> None:
        try:
            reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 24)
            self._writer.write(_encode("127.0.0.1", self.port, "GET", self.path,
                                       {"Accept": "text/event-stream", **self.headers}, None))
            await self._writer.drain()
            self.status, hdrs = await _read_head(reader)
            if self.status != 200:
                self.error = f"status {self.status}: {(await _read_body(reader, hdrs, 'GET'))[:200]!r}"
                return
            buf = b""
            chunked = hdrs.get("transfer-encoding", "").lower() == "chunked"
            while True:
                if chunked:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";")[0].strip(), 16)
                    if size == 0:
                        break
                    buf += await reader.readexactly(size)
                    await reader.readexactly(2)
                else:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    buf += chunk
                while b"\n\n" in buf:
                    block, buf = buf.split(b"\n\n", 1)
                    self._parse(block.decode())
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            self.error = f"{type(e).__name__}: {e}"
        except asyncio.CancelledError:
            pass
        finally:
            self.ended = time.monotonic()
            self._ready.set()
            if self._writer is not None:
                self._writer.transport.abort()

    def _parse(self, block: str) -> None:
        ev_id, ev, data = None, "message", []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            if line.startswith("id:"):
                ev_id = int(line[3:].strip())
            elif line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if not data and ev_id is None:
            return
        try:
            payload = json.loads("\n".join(data)) if data else None
        except ValueError:
            payload = None
        self.events.append(Event(ev_id, ev, payload, time.monotonic()))
        self._ready.set()

    @property
    def last_id(self) -> Optional[int]:
        ids = [e.id for e in self.events if e.id is not None]
        return ids[-1] if ids else None

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._writer is not None:
            self._writer.transport.abort()

    async def wait_closed(self) -> None:
        if self._task is not None:
            try:
                await self._task
            except BaseException:
                pass
