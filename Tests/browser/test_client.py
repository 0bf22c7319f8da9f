"""The JavaScript client's JSON Patch deltas and its history, travel and recording helpers, in
headless Chromium against the real server binary.

Shares the fixtures and helpers of test_page.py. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import hashlib
import http.client
from urllib.parse import urlparse

from selenium.webdriver.common.by import By

from test_page import (  # noqa: F401  (fixtures)
    WAIT,
    ServerProcess,
    api,
    browser,
    run_client_script,
    screenshot,
    server,
    severe_console_errors,
    todo_titles,
    wait,
    wait_loaded,
    wait_ready,
)

# Records every EventSource the page opens (its URL, and the data of each event it receives),
# installed before the page's own scripts run.
RECORD_EVENT_SOURCES = """
(() => {
  const Real = window.EventSource;
  window.recordedStreams = [];
  window.EventSource = class extends Real {
    constructor(url, init) {
      super(url, init);
      const record = {url: String(url), snapshots: 0, states: []};
      window.recordedStreams.push(record);
      super.addEventListener('snapshot', () => { record.snapshots++; });
      super.addEventListener('state', (event) => { record.states.push(JSON.parse(event.data)); });
    }
  };
})();
"""


def dispatch(base, sid, token, feature, action):
    return api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": feature, "action": action})


def recording_page(browser, base, sid, token):
    """The web page on session `sid`, with its EventSources recorded; waits for its live stream."""
    page = browser(1100, 900)
    page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_EVENT_SOURCES})
    page.get(f"{base}/#session={sid}&token={token}")
    wait_ready(page)
    return page


def page_todos(page):
    return page.execute_script("return window.stateApp.subscription.features.todos")


def todo_changes_made_elsewhere(base, sid, token, count):
    """`count` (at least 6) todos added, three toggled, one removed, completed cleared: big enough
    for patches."""
    for index in range(count):
        dispatch(base, sid, token, "todos", {"type": "add", "title": f"todo number {index} with a longish title"})
    for item in ("2", "4", "6"):
        dispatch(base, sid, token, "todos", {"type": "toggle", "id": item})
    dispatch(base, sid, token, "todos", {"type": "remove", "id": "3"})
    dispatch(base, sid, token, "todos", {"type": "clearCompleted"})


def test_the_page_follows_changes_made_elsewhere_through_patches(server, browser):
    base, _ = server
    created = api(base, "POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    page = recording_page(browser, base, sid, token)

    streams = page.execute_script("return window.recordedStreams.map((s) => s.url)")
    assert len(streams) == 1 and "delta=json-patch" in streams[0], streams

    todo_changes_made_elsewhere(base, sid, token, 8)
    server_todos = api(base, "GET", f"/v1/sessions/{sid}/state/todos", token)
    expected = {"version": server_todos["version"], "state": server_todos["state"]}
    wait(page, lambda d: page_todos(d) == expected, "the page's todos never equalled the server's")
    titles = [item["title"] for item in server_todos["state"]["items"]]
    wait(page, lambda d: todo_titles(d) == titles, "the page never rendered the server's todos")

    events = page.execute_script("return window.recordedStreams[0].states")
    todos_events = [event for event in events if event["feature"] == "todos"]
    assert len(todos_events) == server_todos["version"], "a change was missed or repeated"
    patched = [event for event in todos_events if "patch" in event]
    assert len(patched) >= 5, f"too few events came as patches: {len(patched)} of {len(todos_events)}"
    for event in patched:
        assert "state" not in event and event["baseVersion"] == event["version"] - 1, event
    # The small counter still comes whole.
    dispatch(base, sid, token, "counter", {"type": "increment"})
    wait(page, lambda d: d.find_element(By.ID, "count").text == "1", "the counter never showed 1")
    counter_events = page.execute_script(
        "return window.recordedStreams[0].states.filter((e) => e.feature === 'counter')"
    )
    assert len(counter_events) == 1 and counter_events[0]["state"] == {"count": 1} and "patch" not in counter_events[0]
    assert page.execute_script("return window.stateApp.subscription.resyncs") == 0
    screenshot(page, "browser-deltas.png")
    assert severe_console_errors(page) == []


def test_a_patch_on_the_wrong_base_resyncs_from_a_snapshot(server, browser):
    """A forged patched event whose baseVersion is not the page's is never shown: the page's
    subscription drops its EventSource, opens a new one (no Last-Event-ID: a snapshot) and ends
    equal to the server, reporting "reconnecting" and no error."""
    base, _ = server
    created = api(base, "POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    page = recording_page(browser, base, sid, token)
    todo_changes_made_elsewhere(base, sid, token, 8)
    server_todos = api(base, "GET", f"/v1/sessions/{sid}/state/todos", token)
    wait(page, lambda d: page_todos(d)["version"] == server_todos["version"], "the page never caught up")

    page.execute_script(
        """
        const sub = window.stateApp.subscription;
        window.seen = {statuses: [], snapshots: 0, errors: [], changes: []};
        const options = sub._options;
        for (const [name, record] of [
          ['onStatus', (status) => window.seen.statuses.push(status)],
          ['onSnapshot', () => window.seen.snapshots++],
          ['onError', (error) => window.seen.errors.push({code: error.code, fatal: error.fatal})],
          ['onChange', (change) => window.seen.changes.push(change.seq)],
        ]) {
          const original = options[name];
          options[name] = (...args) => { record(...args); return original && original(...args); };
        }
        const known = sub.features.todos.version;
        sub._handle('state', JSON.stringify({
          feature: 'todos', version: known + 1, cause: 'dispatch', action: {type: 'add', title: 'FORGED'},
          baseVersion: known - 2,
          patch: [{op: 'add', path: '/items/-', value: {id: '99', title: 'FORGED', done: false}}],
          effect: null,
        }), String(sub.lastEventId + 1));
        """
    )
    wait(
        page,
        lambda d: d.execute_script(
            "return window.seen.snapshots === 1 && window.stateApp.subscription.status === 'open'"
        ),
        "the subscription never resynced to a fresh snapshot",
    )
    seen = page.execute_script("return window.seen")
    assert seen["statuses"][0] == "reconnecting" and seen["statuses"][-1] == "open", seen
    assert seen["errors"] == [] and seen["changes"] == [], seen
    streams = page.execute_script("return window.recordedStreams.map((s) => ({url: s.url, snapshots: s.snapshots}))")
    assert len(streams) == 2 and all("delta=json-patch" in s["url"] for s in streams), streams
    assert streams[1]["snapshots"] == 1, streams
    assert page.execute_script("return window.stateApp.subscription.resyncs") == 1
    expected = {"version": server_todos["version"], "state": server_todos["state"]}
    assert page_todos(page) == expected
    assert "FORGED" not in todo_titles(page)

    # A patch that fails to apply (a failing `test`) on the right base resyncs as well; patches
    # keep applying afterwards.
    page.execute_script(
        """
        const sub = window.stateApp.subscription;
        const known = sub.features.todos.version;
        sub._handle('state', JSON.stringify({
          feature: 'todos', version: known + 1, cause: 'dispatch', action: null, baseVersion: known,
          patch: [{op: 'test', path: '/nextId', value: -1}, {op: 'replace', path: '/nextId', value: 1000}],
          effect: null,
        }), String(sub.lastEventId + 1));
        """
    )
    wait(
        page,
        lambda d: d.execute_script("return window.seen.snapshots === 2 && window.stateApp.subscription.status === 'open'"),
        "a patch that failed never resynced",
    )
    dispatch(base, sid, token, "todos", {"type": "add", "title": "after the resync, with a long title"})
    server_todos = api(base, "GET", f"/v1/sessions/{sid}/state/todos", token)
    expected = {"version": server_todos["version"], "state": server_todos["state"]}
    wait(page, lambda d: page_todos(d) == expected, "the page never followed a change after the resyncs")
    last = page.execute_script("const s = window.recordedStreams.at(-1).states; return s[s.length - 1]")
    assert "patch" in last, last
    seen = page.execute_script("return window.seen")
    assert seen["errors"] == [] and not page.find_element(By.ID, "error").is_displayed(), seen
    assert page.execute_script("return window.stateApp.subscription.resyncs") == 2
    assert severe_console_errors(page) == []


def test_fetch_transport_resumes_with_patches_and_resyncs_without_last_event_id(server, browser):
    """The fetch transport resumes with Last-Event-ID and applies the replayed patches (no
    snapshot, nothing missed or repeated); a patch on the wrong base makes it reconnect without
    Last-Event-ID. `delta: false` asks for whole states."""
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const requests = [];
        const realFetch = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).includes('/events')) requests.push({url: String(url), lastEventId: init.headers['Last-Event-ID'] ?? null});
          return realFetch(url, init);
        };
        try {
          const c = await StateClient.createSession();
          const seen = {snapshots: 0, seqs: [], patched: 0, statuses: [], errors: []};
          const sub = c.subscribe({
            transport: 'fetch', features: ['todos'],
            onSnapshot() { seen.snapshots++; },
            onChange(change) { seen.seqs.push(change.seq); if (change.patch) seen.patched++; },
            onStatus(status) { seen.statuses.push(status); },
            onError(error) { seen.errors.push(error.code); },
          });
          await until(() => seen.snapshots === 1 && sub.status === 'open');
          for (let i = 0; i < 6; i++) await c.dispatch('todos', {type: 'add', title: 'a todo with a title of some length ' + i});
          await until(() => seen.seqs.length === 6);
          sub.reconnect();  // resumes with Last-Event-ID: the server replays patched events
          for (let i = 0; i < 4; i++) await c.dispatch('todos', {type: 'toggle', id: String(i + 1)});
          await until(() => seen.seqs.length === 10);
          const afterResume = {snapshots: seen.snapshots, patched: seen.patched, seqs: [...seen.seqs],
                               state: sub.features.todos, server: await c.getState('todos')};

          // A forged patch on the wrong base: reconnect without Last-Event-ID, a fresh snapshot.
          const known = sub.features.todos.version;
          sub._handle('state', JSON.stringify({feature: 'todos', version: known + 1, cause: 'dispatch', action: null,
            baseVersion: known + 5, patch: [], effect: null}), String(sub.lastEventId + 1));
          await until(() => seen.snapshots === 2 && sub.status === 'open');
          await c.dispatch('todos', {type: 'remove', id: '2'});
          await until(() => seen.seqs.length === 11);
          const afterResync = {state: sub.features.todos, server: await c.getState('todos'), resyncs: sub.resyncs};
          sub.close();

          // Whole states only, when asked.
          const whole = {changes: []};
          const sub2 = c.subscribe({transport: 'fetch', delta: false, onSnapshot() { whole.ready = true; },
                                    onChange(change) { whole.changes.push(change); }});
          await until(() => whole.ready && sub2.status === 'open');
          await c.dispatch('todos', {type: 'add', title: 'one more todo with a title of some length'});
          await until(() => whole.changes.length === 1);
          sub2.close();
          return {requests, seen, afterResume, afterResync, whole: whole.changes[0]};
        } finally {
          window.fetch = realFetch;
        }
        """,
    )
    requests, seen = result["requests"], result["seen"]
    assert [r["lastEventId"] is None for r in requests] == [True, False, True, True], requests
    assert all("delta=json-patch" in r["url"] for r in requests[:3]) and "delta" not in requests[3]["url"], requests
    resumed = result["afterResume"]
    assert resumed["snapshots"] == 1, "a resumed stream must not start from a snapshot"
    assert resumed["seqs"] == list(range(resumed["seqs"][0], resumed["seqs"][0] + 10)), resumed["seqs"]
    assert resumed["patched"] >= 5, resumed
    assert resumed["state"] == {"version": resumed["server"]["version"], "state": resumed["server"]["state"]}
    resynced = result["afterResync"]
    assert resynced["resyncs"] == 1
    assert resynced["state"] == {"version": resynced["server"]["version"], "state": resynced["server"]["state"]}
    assert seen["errors"] == [], seen
    assert seen["statuses"].count("reconnecting") == 2 and seen["statuses"][-1] == "closed", seen["statuses"]
    whole = result["whole"]
    assert "patch" not in whole and len(whole["state"]["items"]) == 6, whole


def test_apply_patch_follows_rfc_6902(server, browser):
    """StateClient.applyPatch on examples of RFC 6902's appendix A (and a copy): a new document,
    the input untouched; a failing operation throws a PatchError naming it."""
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/devtools")  # the devtools page loads /client.js
    wait(page, lambda d: d.execute_script("return typeof StateClient === 'function'"), "client.js never loaded")
    cases = [
        # A.1 adding an object member
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
        # A.2 adding an array element
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
        # A.3 removing an object member
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        # A.4 removing an array element
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        # A.5 replacing a value
        ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
        # A.6 moving a value
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        # A.7 moving an array element
        ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
         {"foo": ["all", "cows", "eat", "grass"]}),
        # A.8 testing a value: success
        ({"baz": "qux", "foo": ["a", 2, "c"]},
         [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
         {"baz": "qux", "foo": ["a", 2, "c"]}),
        # A.10 adding a nested member object
        ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
         {"foo": "bar", "child": {"grandchild": {}}}),
        # A.11 ignoring unrecognized elements
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}], {"foo": "bar", "baz": "qux"}),
        # A.14 ~ escape ordering
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        # A.16 adding an array value, and `-` appends
        ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}], {"foo": ["bar", ["abc", "def"]]}),
        # copy (no example in the appendix); the copy is independent of its source
        ({"a": {"b": [1]}}, [{"op": "copy", "from": "/a", "path": "/c"}, {"op": "add", "path": "/c/b/-", "value": 2}],
         {"a": {"b": [1]}, "c": {"b": [1, 2]}}),
        # the whole document
        ({"a": 1}, [{"op": "replace", "path": "", "value": [1, 2]}], [1, 2]),
        # test compares JSON values, not member order
        ({"o": {"x": 1, "y": [1, {"z": None}]}}, [{"op": "test", "path": "/o", "value": {"y": [1, {"z": None}], "x": 1}}],
         {"o": {"x": 1, "y": [1, {"z": None}]}}),
    ]
    failures = [
        # A.9 testing a value: error
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        # A.12 adding to a nonexistent target
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        # A.15 comparing strings and numbers
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),
        # removing what is not there, an index past the end, `-` outside add, an unknown op
        ({"foo": "bar"}, [{"op": "remove", "path": "/nope"}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/2", "value": 0}]),
        ({"foo": [1]}, [{"op": "replace", "path": "/foo/-", "value": 0}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/01"}]),
        ({"foo": {"a": 1}}, [{"op": "move", "from": "/foo", "path": "/foo/a/b"}]),
        ({"foo": 1}, [{"op": "copy", "from": "/bar", "path": "/baz"}]),
        ({"foo": 1}, [{"op": "frobnicate", "path": "/foo"}]),
        ({"foo": 1}, [{"op": "replace", "path": "/foo", "value": 2}, {"op": "test", "path": "/foo", "value": 1}]),
    ]
    result = page.execute_script(
        """
        const [cases, failures] = arguments;
        const results = cases.map(([document, patch]) => {
          const before = JSON.stringify(document);
          const out = StateClient.applyPatch(document, patch);
          return {out, untouched: JSON.stringify(document) === before};
        });
        const errors = failures.map(([document, patch]) => {
          try { return {returned: StateClient.applyPatch(document, patch)}; }
          catch (e) { return {name: e.name, index: e.index, isPatchError: e instanceof StateClient.PatchError, message: e.message}; }
        });
        return {results, errors};
        """,
        [[doc, patch] for doc, patch, _ in cases],
        [list(case) for case in failures],
    )
    for (document, patch, expected), got in zip(cases, result["results"]):
        assert got["out"] == expected, (document, patch, got)
        assert got["untouched"], (document, patch)
    for (document, patch), got in zip(failures, result["errors"]):
        assert got.get("isPatchError") and got["name"] == "PatchError", (document, patch, got)
        assert got["index"] == len(patch) - 1, (document, patch, got)
    assert "operation 0 (test \"/baz\") failed" in result["errors"][0]["message"], result["errors"][0]


def test_client_history_travel_recording_and_import(server, browser):
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const c = await StateClient.createSession();
        for (let i = 0; i < 3; i++) await c.dispatch('counter', {type: 'increment'});
        await c.dispatch('todos', {type: 'add', title: 'milk'});
        await c.dispatch('todos', {type: 'add', title: 'bread'});
        const all = await c.history();
        const firstPage = await c.history({limit: 2});
        const secondPage = await c.history({after: firstPage.next, limit: 2});
        const todosOnly = await c.history({feature: 'todos'});

        // Travel: a new change, seen by subscribers with cause "travel".
        const travels = [];
        let ready = false;
        const sub = c.subscribe({onSnapshot() { ready = true; }, onChange(change) { if (change.cause === 'travel') travels.push(change); }});
        await until(() => ready && sub.status === 'open');
        const travelled = await c.travel('counter', 1);
        await until(() => travels.length === 1);
        sub.close();
        let conflict, unreachable;
        try { await c.travel('counter', 0, {ifMatch: 1}); } catch (e) { conflict = {status: e.status, code: e.code}; }
        try { await c.travel('counter', 99); } catch (e) { unreachable = {status: e.status, code: e.code}; }
        const withIfMatch = await c.travel('counter', 3, {ifMatch: 4});
        const after = await c.history({after: all.changes.at(-1).seq});

        // A recording round-trips into a new session with the same states.
        const recording = await c.recording();
        const copy = await StateClient.importRecording(recording);
        let diverges;
        const broken = JSON.parse(JSON.stringify(recording));
        broken.changes[0].state = {count: 42};
        try { await StateClient.importRecording(broken); } catch (e) { diverges = {status: e.status, code: e.code}; }
        return {all, firstPage, secondPage, todosOnly, travelled, travelEvent: travels[0], conflict, unreachable,
                withIfMatch, after, recording, copy: {id: copy.sessionId, changes: copy.importedChanges},
                original: await c.getState(), imported: await copy.getState(), diverges, originalId: c.sessionId};
        """,
    )
    changes = result["all"]["changes"]
    assert [(ch["seq"], ch["feature"], ch["version"], ch["cause"]) for ch in changes] == [
        (1, "counter", 1, "dispatch"), (2, "counter", 2, "dispatch"), (3, "counter", 3, "dispatch"),
        (4, "todos", 1, "dispatch"), (5, "todos", 2, "dispatch"),
    ], changes
    assert changes[3]["action"] == {"type": "add", "title": "milk"} and result["all"]["next"] is None
    assert [ch["seq"] for ch in result["firstPage"]["changes"]] == [1, 2] and result["firstPage"]["next"] == 2
    assert [ch["seq"] for ch in result["secondPage"]["changes"]] == [3, 4]
    assert [ch["seq"] for ch in result["todosOnly"]["changes"]] == [4, 5]

    assert result["travelled"] == {"feature": "counter", "version": 4, "state": {"count": 1}}
    event = result["travelEvent"]
    assert event["cause"] == "travel" and event["action"] is None and event["version"] == 4 and event["state"] == {"count": 1}
    assert result["conflict"] == {"status": 412, "code": "version_conflict"}
    assert result["unreachable"] == {"status": 422, "code": "version_unreachable"}
    assert result["withIfMatch"] == {"feature": "counter", "version": 5, "state": {"count": 3}}
    assert [(ch["seq"], ch["cause"], ch["version"]) for ch in result["after"]["changes"]] == [(6, "travel", 4), (7, "travel", 5)]

    assert result["recording"]["format"] == "stateserver-recording" and len(result["recording"]["changes"]) == 7
    assert result["copy"]["id"] != result["originalId"] and result["copy"]["changes"] == 7
    original = {name: entry["state"] for name, entry in result["original"]["features"].items()}
    imported = {name: entry["state"] for name, entry in result["imported"]["features"].items()}
    assert imported == original and original["counter"] == {"count": 3} and len(original["todos"]["items"]) == 2
    assert result["diverges"] == {"status": 422, "code": "recording_diverges"}


def test_an_admin_subscription_waits_out_a_refused_stream_instead_of_giving_up(browser):
    """The admin credential reads a session's events and history but not its state: when its
    EventSource is refused for good (429 here), the client's check that the session still exists
    must not take the state's 404 as the end."""
    token = "browser-admin-token"
    process = ServerProcess(
        ["--port", "0"],
        "browser-admin-server.log",
        env={
            "STATE_SERVER_ADMIN_TOKEN_HASH": hashlib.sha256(token.encode()).hexdigest(),
            "STATE_SERVER_STREAMS_PER_SESSION": "1",
        },
    )
    holder = None
    try:
        base = process.base
        sid = api(base, "POST", "/v1/sessions")["id"]
        # One stream (the admin's own, from Python) holds the session's only slot.
        address = urlparse(base)
        holder = http.client.HTTPConnection(address.hostname, address.port, timeout=WAIT)
        holder.request("GET", f"/v1/sessions/{sid}/events", headers={"Authorization": "Bearer " + token})
        assert holder.getresponse().status == 200
        page = browser(800, 600)
        page.get(base + "/")
        wait_loaded(page)
        page.execute_script(
            """
            const watch = window.adminWatch = {errors: [], snapshots: 0};
            const client = new StateClient({sessionId: arguments[0], token: arguments[1]});
            watch.sub = client.subscribe({
              onSnapshot() { watch.snapshots++; },
              onError(error) { watch.errors.push({code: error.code, fatal: !!error.fatal}); },
            });
            """,
            sid,
            token,
        )
        wait(
            page,
            lambda d: d.execute_script(
                "return performance.getEntriesByType('resource').some((e) => e.name.includes('/history'))"
            ),
            "the refused stream never led to the history check",
        )
        assert page.execute_script("return window.adminWatch.sub.status") != "closed"
        holder.close()
        holder = None
        wait(
            page,
            lambda d: d.execute_script("return window.adminWatch.snapshots === 1 && window.adminWatch.sub.status === 'open'"),
            "the admin subscription never opened once the slot was free",
        )
        assert page.execute_script("return window.adminWatch.errors") == []
    finally:
        if holder is not None:
            holder.close()
        process.stop()
