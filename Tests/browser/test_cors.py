"""CORS (issue 25 item 4) in headless Chromium: a page served from another origin (a second local
HTTP server, Python's http.server on another port of 127.0.0.1) loads the server's /client.js
and uses the API across origins — creates a session, dispatches, streams with both transports.
A page on an origin the server does not allow gets nothing done: its dispatch's preflight is
refused, and the session stays as it was.

Shares the fixtures and helpers of test_page.py. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import functools
import http.server
import threading

import pytest

from test_page import (  # noqa: F401  (fixtures)
    CLIENT_HELPERS,
    ServerProcess,
    api,
    browser,
    screenshot,
    severe_console_errors,
)

PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Another origin</title></head>
<body>
<h1>A page on another origin</h1>
<p id="server">{server}</p>
<script src="{server}/client.js"></script>
</body>
</html>
"""


class OtherOrigin:
    """A second local web server (another port: another origin) serving one page that loads
    `server`'s /client.js."""

    def __init__(self, directory):
        self.directory = directory
        handler = functools.partial(Quiet, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve_page(self, server_base):
        (self.directory / "index.html").write_text(PAGE.format(server=server_base))
        return self.origin + "/index.html"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture
def other_origin(tmp_path):
    site = OtherOrigin(tmp_path)
    try:
        yield site
    finally:
        site.stop()


def run(driver, body, *args):
    """Runs `body` (async JavaScript, `args` as arguments[0], ...) on the page; returns what it
    returns, or {error: ...}."""
    return driver.execute_async_script(
        CLIENT_HELPERS + "(async () => {" + body + "})().then(done, (e) => done({error: String(e && e.message || e)}));",
        *args,
    )


CROSS_ORIGIN_SESSION = """
const base = arguments[0], transport = arguments[1];
const client = await StateClient.createSession({baseUrl: base});
let snapshot = null;
const changes = [];
const sub = client.subscribe({
  transport,
  onSnapshot(features) { snapshot = features; },
  onChange(change) { changes.push(change); },
});
await until(() => snapshot !== null && sub.status === 'open');
const first = await client.dispatch('counter', {type: 'increment', by: 2});
await client.dispatch('todos', {type: 'add', title: 'from another origin'});
await until(() => changes.length === 2);
const state = await client.getState('counter');
sub.close();
return {
  id: client.sessionId, token: client.token, origin: location.origin,
  firstVersion: first.version, seen: changes.map((c) => [c.feature, c.version]),
  counter: sub.features.counter, state,
};
"""


@pytest.mark.parametrize("transport", ["eventsource", "fetch"])
def test_a_page_on_an_allowed_origin_creates_dispatches_and_streams(browser, other_origin, transport):
    process = ServerProcess(
        ["--port", "0"], f"browser-cors-{transport}.log", env={"STATE_SERVER_CORS_ALLOWED_ORIGINS": other_origin.origin}
    )
    try:
        base = process.base
        page = browser(900, 600)
        page.get(other_origin.serve_page(base))
        assert page.execute_script("return typeof StateClient") == "function", "the server's /client.js did not load"
        result = run(page, CROSS_ORIGIN_SESSION, base, transport)
        assert "error" not in result, result
        assert result["origin"] == other_origin.origin and result["origin"] != base
        assert result["firstVersion"] == 1
        assert result["seen"] == [["counter", 1], ["todos", 1]], result
        assert result["counter"] == {"version": 1, "state": {"count": 2}}, result
        assert result["state"]["state"] == {"count": 2}, result
        # The server holds what the page did.
        todos = api(base, "GET", f"/v1/sessions/{result['id']}/state/todos", result["token"])
        assert [item["title"] for item in todos["state"]["items"]] == ["from another origin"]
        screenshot(page, f"browser-cors-{transport}.png")
        assert severe_console_errors(page) == []
    finally:
        process.stop()


def test_a_page_on_another_origin_gets_nothing_done(browser, other_origin):
    process = ServerProcess(
        ["--port", "0"], "browser-cors-refused.log", env={"STATE_SERVER_CORS_ALLOWED_ORIGINS": "http://app.example"}
    )
    try:
        base = process.base
        created = api(base, "POST", "/v1/sessions")
        page = browser(900, 600)
        page.get(other_origin.serve_page(base))
        result = run(
            page,
            """
            const client = new StateClient({sessionId: arguments[0], token: arguments[1], baseUrl: arguments[2]});
            try {
              await client.dispatch('counter', {type: 'increment'});
              return {dispatched: true};
            } catch (error) {
              return {dispatched: false, message: String(error && error.message || error)};
            }
            """,
            created["id"],
            created["token"],
            base,
        )
        assert result["dispatched"] is False, result
        # The preflight was refused, so the dispatch itself was never sent.
        state = api(base, "GET", f"/v1/sessions/{created['id']}/state/counter", created["token"])
        assert state["version"] == 0 and state["state"] == {"count": 0}, state
        errors = severe_console_errors(page)
        assert any("CORS" in entry["message"] for entry in errors), errors
    finally:
        process.stop()
