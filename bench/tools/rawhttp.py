"""Tiny raw-socket HTTP/1.1 helpers shared by the bench tools (no third-party packages).

Only what the bench needs: building requests, parsing Content-Length responses from a byte
buffer (keep-alive, possibly several pipelined responses in one read), reading a process's
RSS and CPU time from /proc. Everything talks to 127.0.0.1 only.
"""

import json
import os
import socket
import time
from urllib.parse import urlsplit


def split_url(url):
    u = urlsplit(url)
    host = u.hostname or "127.0.0.1"
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"bench tools only talk to the loopback address, not {host}")
    return "127.0.0.1" if host == "localhost" else host, u.port or 80


def request(method, path, headers=None, body=b""):
    """Bytes of one HTTP/1.1 keep-alive request."""
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def dispatch_request(sid, token, by=1):
    body = '{"feature":"counter","action":{"type":"increment","by":%d}}' % by
    return request("POST", f"/v1/sessions/{sid}/dispatch",
                   {"Authorization": f"Bearer {token}"}, body)


def state_request(sid, token):
    return request("GET", f"/v1/sessions/{sid}/state/counter", {"Authorization": f"Bearer {token}"})


def events_request(sid, token):
    return request("GET", f"/v1/sessions/{sid}/events?feature=counter",
                   {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})


class ResponseParser:
    """Incremental parser for Content-Length (or empty-body) responses on one connection."""

    __slots__ = ("buf",)

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        """Appends data; returns a list of (status, body) for every complete response."""
        self.buf += data
        out = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return out
            head = self.buf[:end]
            status = int(head[9:12])
            length = 0
            lower = head.lower()
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 2)
                length = int(head[i + 17:j if j >= 0 else len(head)].strip())
            elif b"transfer-encoding: chunked" in lower:
                raise ValueError("chunked response where a Content-Length one was expected")
            total = end + 4 + length
            if len(self.buf) < total:
                return out
            out.append((status, self.buf[end + 4:total]))
            self.buf = self.buf[total:]


def connect(host, port, blocking=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.connect((host, port))
    s.setblocking(blocking)
    return s


def roundtrip(sock, parser, req, timeout=10.0):
    """Sends one request on a blocking socket and returns (status, body)."""
    sock.settimeout(timeout)
    sock.sendall(req)
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        got = parser.feed(data)
        if got:
            return got[0]


def read_sessions(path, limit=None):
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out.append((parts[0], parts[1]))
                if limit and len(out) >= limit:
                    break
    return out


def rss_kib(pid):
    """VmRSS of a process in KiB (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid):
    """utime + stime of a process (all threads) in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def emit(out_path, record):
    """Appends one JSON record to the results file and prints it."""
    record.setdefault("time", time.strftime("%H:%M:%S"))
    line = json.dumps(record, sort_keys=True)
    if out_path:
        with open(out_path, "a") as f:
            f.write(line + "\n")
    print(line, flush=True)
