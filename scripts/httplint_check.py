"""Lints every route's reply with httplint (the linter behind REDbot), for `make test`.

    python scripts/httplint_check.py BASE_URL

Makes one request per route and case (success, 304, errors, HEAD) against a running server,
feeds the request and the raw reply to httplint, and prints each note. Fails (exit 1) when a
note of level "warning" or "bad" is not in ALLOWED below, where each allowed note has its reason.
"""

import http.client
import json
import sys
import time
from urllib.parse import urlsplit

from httplint import HttpRequestLinter, HttpResponseLinter, levels

# (note class name, route or "*") -> why the note is accepted. Nothing else may warn.
ALLOWED = {
    ("FRESHNESS_NO_CACHE_NO_VALIDATOR", "/v1/sessions/{id}/events"): (
        "the contract (http-api-v1.md) names 'Cache-Control: no-cache' for the event stream; a "
        "stream is chunked and never complete, so no cache can store it anyway"
    ),
    ("STATUS_BAD_REQUEST", "/v1/sessions/{id}/dispatch"): (
        "the check sends a malformed JSON body on purpose to lint the 400 reply"
    ),
    ("STATUS_BAD_REQUEST", "/v1/sessions/{id}/history"): (
        "the check sends limit=0 on purpose to lint the 400 reply"
    ),
}


def note_name(note):
    return type(note).__name__


def lint(base, method, path, route, headers=None, body=None, read_limit=None):
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = dict(headers or {})
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    if read_limit is None:
        content = response.read()
        complete = True
    else:
        content = response.read1(read_limit) if hasattr(response, "read1") else b""
        complete = False
    raw_headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.getheaders()]
    connection.close()

    request = HttpRequestLinter()
    request.process_request_topline(method.encode(), (base + path).encode(), b"HTTP/1.1")
    request.process_headers([(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()])
    if body is not None:
        request.feed_content(body if isinstance(body, bytes) else body.encode())
    request.finish_content(True)

    linter = HttpResponseLinter(start_time=time.time(), _related=request)
    linter.is_head_response = method == "HEAD"
    linter.process_response_topline(b"HTTP/1.1", str(response.status).encode(), response.reason.encode("latin-1"))
    linter.process_headers(raw_headers)
    if method != "HEAD":
        linter.feed_content(content)
    linter.finish_content(complete)
    return response.status, dict(response.getheaders()), content, linter.notes


def main():
    base = sys.argv[1].rstrip("/")
    failures = []
    checked = 0

    def check(method, path, route, expect, **kw):
        nonlocal checked
        status, headers, content, notes = lint(base, method, path, route, **kw)
        checked += 1
        shown = f"{method} {route} -> {status}"
        if status != expect:
            failures.append(f"{shown}: expected {expect}")
        for note in notes:
            level = note.level
            name = note_name(note)
            allowed = ALLOWED.get((name, route)) or ALLOWED.get((name, "*"))
            if level in (levels.WARN, levels.BAD):
                if allowed:
                    print(f"  allowed  {shown}: {name}: {note.summary} ({allowed})")
                else:
                    print(f"  WARNING  {shown}: {name}: {note.summary}")
                    failures.append(f"{shown}: {name}: {note.summary}")
        return status, headers, content

    _, headers, content = check("POST", "/v1/sessions", "/v1/sessions", 201, body="")
    session = json.loads(content)
    sid, token = session["id"], session["token"]
    auth = {"Authorization": f"Bearer {token}"}
    prefix = f"/v1/sessions/{sid}"
    increment = json.dumps({"feature": "counter", "action": {"type": "increment"}})

    for path in ["/", "/devtools", "/client.js", "/openapi.json", "/v1/features"]:
        _, headers, _ = check("GET", path, path, 200)
        check("HEAD", path, path, 200)
        check("GET", path, path, 304, headers={"If-None-Match": headers.get("ETag", '"none"')})
    for path in ["/healthz", "/readyz", "/metrics"]:
        check("GET", path, path, 200)
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 200, headers=auth, body=increment)
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 200,
          headers={**auth, "Idempotency-Key": "k1"}, body=increment)
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 200,
          headers={**auth, "Idempotency-Key": "k1"}, body=increment)
    check("GET", f"{prefix}/state", "/v1/sessions/{id}/state", 200, headers=auth)
    _, headers, _ = check("GET", f"{prefix}/state/counter", "/v1/sessions/{id}/state/{feature}", 200, headers=auth)
    check("GET", f"{prefix}/state/counter", "/v1/sessions/{id}/state/{feature}", 304,
          headers={**auth, "If-None-Match": headers.get("ETag", "")})
    check("PUT", f"{prefix}/state/counter", "/v1/sessions/{id}/state/{feature}", 200, headers=auth,
          body=json.dumps({"state": {"count": 5}}))
    check("DELETE", f"{prefix}/state/counter", "/v1/sessions/{id}/state/{feature}", 200, headers=auth)
    check("GET", f"{prefix}/events", "/v1/sessions/{id}/events", 200, headers=auth, read_limit=64)
    check("GET", f"{prefix}/history?limit=2", "/v1/sessions/{id}/history", 200, headers=auth)
    check("HEAD", f"{prefix}/history", "/v1/sessions/{id}/history", 200, headers=auth)
    check("GET", f"{prefix}/history?limit=0", "/v1/sessions/{id}/history", 400, headers=auth)
    check("GET", "/v1/admin/sessions", "/v1/admin/sessions", 403, headers=auth)
    check("GET", f"{prefix}/recording", "/v1/sessions/{id}/recording", 200, headers=auth)
    # Errors.
    check("GET", "/nowhere", "-", 404)
    check("DELETE", "/healthz", "/healthz", 405)
    check("HEAD", f"{prefix}/events", "/v1/sessions/{id}/events", 405, headers=auth)
    check("GET", f"{prefix}/state", "/v1/sessions/{id}/state", 401)
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 400, headers=auth, body="{")
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 412,
          headers={**auth, "If-Match": '"99"'}, body=increment)
    check("POST", f"{prefix}/dispatch", "/v1/sessions/{id}/dispatch", 422, headers=auth,
          body=json.dumps({"feature": "counter", "action": {"type": "nope"}}))
    check("DELETE", prefix, "/v1/sessions/{id}", 204, headers=auth)

    print(f"httplint: {checked} replies checked, {len(failures)} unexplained warnings")
    for failure in failures:
        print(f"  {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
