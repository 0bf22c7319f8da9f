"""client.js's optimistic store (`client.optimistic(feature, options)`, `StateClient.OptimisticStore`)
in headless Chromium against the real server binary.

Predictions shown at once, a queue that survives a reload and reaches the server exactly once,
a server-side refusal rolled back and reported once, and pending actions without a reducer.
Shares the fixtures and helpers of test_page.py. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import json
import socket

from test_page import (  # noqa: F401  (fixtures)
    api,
    browser,
    run_client_script,
    server,
    severe_console_errors,
    wait,
    wait_loaded,
)

INT_MAX = 2**63 - 1  # the counter's largest count (Swift's Int.max)

# A reducer that mirrors the server's counter but knows no limits (JavaScript numbers).
LAX_REDUCER = """
const laxCounter = (state, action) => {
  const by = action.by === undefined || action.by === null ? 1 : action.by;
  if (action.type === 'increment') state.count += by;
  else if (action.type === 'decrement') state.count -= by;
  else if (action.type === 'set') state.count = action.value;
  return state;
};
"""


def new_session(base):
    created = api(base, "POST", "/v1/sessions")
    return created["id"], created["token"]


def counter(base, sid, token):
    """The server's counter, read over HTTP: (version, count)."""
    reply = api(base, "GET", f"/v1/sessions/{sid}/state/counter", token)
    return reply["version"], reply["state"]["count"]


def unused_port():
    """A local port where nothing listens (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def blank_page(browser, base):
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    return page


def test_sends_are_predicted_at_once_and_the_server_ends_in_the_prediction(server, browser):
    base, _ = server
    sid, token = new_session(base)
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "counter", "action": {"type": "set", "value": 10}})
    page = blank_page(browser, base)
    result = run_client_script(
        page,
        LAX_REDUCER
        + """
        const client = new StateClient({sessionId: arguments[0], token: arguments[1]});
        const predictions = [];
        const store = client.optimistic('counter', {
          reducer: laxCounter,
          onUpdate: (s) => { if (s.state !== null) predictions.push(s.state.count); },
        }).start();
        await until(() => store.version !== null);
        const before = store.state.count;
        // Synchronously after each send, before any answer can have arrived.
        const immediate = [
          store.send({type: 'increment', by: 5}).count,
          store.send({type: 'decrement', by: 2}).count,
          store.send({type: 'increment'}).count,
        ];
        const pendingRightAfter = store.pendingCount;
        await store.settled(8000);
        await until(() => store.confirmed.count === immediate[2]);
        return {before, immediate, pendingRightAfter, state: store.state, confirmed: store.confirmed,
                version: store.version, predictions,
                stored: localStorage.getItem(`stateserver.pending.${arguments[0]}.counter`)};
        """.replace("arguments[0]", json.dumps(sid)).replace("arguments[1]", json.dumps(token)),
    )
    assert result["before"] == 10
    assert result["immediate"] == [15, 13, 14], result
    assert result["pendingRightAfter"] == 3
    version, count = counter(base, sid, token)
    assert count == 14, "the server's state is not the prediction"
    assert result["state"] == {"count": 14} and result["confirmed"] == {"count": 14}
    assert result["version"] == version
    assert result["stored"] is None, "a settled store left its queue in localStorage"
    # Rebasing on the server's answers never shows a count the user did not ask for.
    assert set(result["predictions"]) <= {10, 15, 13, 14}, result["predictions"]
    assert not severe_console_errors(page)


def test_a_queue_made_offline_survives_a_reload_and_reaches_the_server_exactly_once(server, browser):
    base, _ = server
    sid, token = new_session(base)
    version_before, count_before = counter(base, sid, token)
    dead = f"http://127.0.0.1:{unused_port()}"
    page = blank_page(browser, base)
    storage_key = f"stateserver.pending.{sid}.counter"
    offline = run_client_script(
        page,
        LAX_REDUCER
        + f"""
        const real = StateClient._fetch;
        let failures = 0;
        StateClient._fetch = async (url, init) => {{
          try {{ return await real(url, init); }} catch (e) {{ if (e.code === 'network_error') failures++; throw e; }}
        }};
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}, baseUrl: {json.dumps(dead)}}});
        const store = client.optimistic('counter', {{reducer: laxCounter}}).start({{subscribe: false}});
        store.send({{type: 'increment', by: 2}});
        store.send({{type: 'increment', by: 3}});
        store.send({{type: 'decrement'}});
        await until(() => failures >= 2);  // the first action was tried, and tried again: no answer
        window.offlineStore = store;
        return {{pending: store.pending.map((e) => e.action), stored: JSON.parse(localStorage.getItem({json.dumps(storage_key)}))}};
        """,
    )
    sent = [{"type": "increment", "by": 2}, {"type": "increment", "by": 3}, {"type": "decrement"}]
    assert offline["pending"] == sent
    assert [entry["action"] for entry in offline["stored"]["pending"]] == sent, "the queue is not in localStorage"
    assert offline["stored"]["pending"][0]["firstSentAt"] is not None
    assert counter(base, sid, token) == (version_before, count_before), "an action reached the server while it was unreachable"

    page.refresh()
    wait_loaded(page)
    resumed = run_client_script(
        page,
        LAX_REDUCER
        + f"""
        if (window.offlineStore) throw new Error('the page did not reload');
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}}});
        const store = client.optimistic('counter', {{reducer: laxCounter}});
        const before = {{pending: store.pending.map((e) => e.action), keys: store.pending.map((e) => e.key)}};
        store.start();
        await store.settled(8000);
        await until(() => store.version !== null && store.state.count === 4);
        return {{before, state: store.state, version: store.version,
                 stored: localStorage.getItem({json.dumps(storage_key)})}};
        """,
    )
    assert resumed["before"]["pending"] == sent, "a new store did not resume the stored queue"
    assert resumed["before"]["keys"] == [entry["key"] for entry in offline["stored"]["pending"]], "keys changed"
    assert resumed["stored"] is None
    # Exactly once: three actions, three versions, +2 +3 -1.
    assert counter(base, sid, token) == (version_before + 3, count_before + 4)
    assert resumed["version"] == version_before + 3


def test_an_answer_lost_on_the_way_back_is_not_applied_twice_after_a_reload(server, browser):
    base, _ = server
    sid, token = new_session(base)
    version_before, count_before = counter(base, sid, token)
    page = blank_page(browser, base)
    storage_key = f"stateserver.pending.{sid}.counter"
    run_client_script(
        page,
        f"""
        const real = StateClient._fetch;
        window.lost = 0;
        // Every dispatch reaches the server; its answer never reaches the page.
        StateClient._fetch = async (url, init) => {{
          if (!String(url).endsWith('/dispatch')) return real(url, init);
          await real(url, init);
          window.lost++;
          throw new StateClient.Error('the answer was lost');
        }};
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}}});
        const store = client.optimistic('counter', {{}}).start({{subscribe: false}});
        store.send({{type: 'increment', by: 7}});
        await until(() => window.lost >= 2);
        """,
    )
    assert counter(base, sid, token) == (version_before + 1, count_before + 7)
    page.refresh()
    wait_loaded(page)
    resumed = run_client_script(
        page,
        f"""
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}}});
        const store = client.optimistic('counter', {{}});
        const pendingBefore = store.pendingCount;
        store.start({{subscribe: false}});
        await store.settled(8000);
        return {{pendingBefore, state: store.state, version: store.version,
                 stored: localStorage.getItem({json.dumps(storage_key)})}};
        """,
    )
    assert resumed["pendingBefore"] == 1
    assert resumed["stored"] is None
    assert counter(base, sid, token) == (version_before + 1, count_before + 7), "the resumed action was applied twice"
    assert resumed["state"] == {"count": count_before + 7} and resumed["version"] == version_before + 1


def test_a_refusal_by_the_server_is_rolled_back_and_reported_once(server, browser):
    base, _ = server
    sid, token = new_session(base)
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "counter", "action": {"type": "set", "value": INT_MAX}})
    page = blank_page(browser, base)
    result = run_client_script(
        page,
        LAX_REDUCER
        + f"""
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}}});
        const rejections = [];
        const store = client.optimistic('counter', {{
          reducer: laxCounter,
          onRejection: (r) => rejections.push({{action: r.action, code: r.error.code, status: r.error.status, key: r.key}}),
        }}).start();
        await until(() => store.version !== null);
        const confirmedBefore = store.confirmed.count, versionBefore = store.version;
        // The lax reducer accepts what the server refuses (the count would overflow).
        const predicted = store.send({{type: 'increment', by: 1000000}}).count;
        const differed = predicted !== confirmedBefore;
        store.send({{type: 'decrement', by: 1}});
        await store.settled(8000);
        await until(() => store.version === versionBefore + 1);  // the decrement (counts this big are not exact here)
        // One more round trip through the stream: nothing reports the refusal again.
        const fence = store.version;
        await client.dispatch('counter', {{type: 'decrement', by: 1}});
        await until(() => store.version > fence);
        return {{differed, rejections, state: store.state, confirmed: store.confirmed, pending: store.pendingCount}};
        """,
    )
    assert result["differed"], "the lax reducer did not predict the refused increment"
    assert len(result["rejections"]) == 1, result["rejections"]
    rejection = result["rejections"][0]
    assert rejection["action"] == {"type": "increment", "by": 1000000}
    assert (rejection["status"], rejection["code"]) == (422, "action_rejected")
    assert result["pending"] == 0
    assert result["state"] == result["confirmed"], "the refused prediction was not rolled back"
    _, count = counter(base, sid, token)
    # -1 from the store, -1 from the fence.
    assert count == INT_MAX - 2, "the action after the refused one was not sent, or the refused one was applied"


def test_without_a_reducer_pending_actions_are_reported_as_pending(server, browser):
    base, _ = server
    sid, token = new_session(base)
    page = blank_page(browser, base)
    result = run_client_script(
        page,
        f"""
        const real = StateClient._fetch;
        let release;
        const gate = new Promise((resolve) => {{ release = resolve; }});
        // Dispatches wait for the gate: the action stays unconfirmed until the test opens it.
        StateClient._fetch = async (url, init) => {{
          if (String(url).endsWith('/dispatch')) await gate;
          return real(url, init);
        }};
        const client = new StateClient({{sessionId: {json.dumps(sid)}, token: {json.dumps(token)}}});
        const updates = [];
        const store = client.optimistic('counter', {{
          onUpdate: (s) => updates.push({{pending: s.pendingCount, count: s.state && s.state.count}}),
        }}).start();
        await until(() => store.version !== null);
        const returned = store.send({{type: 'increment', by: 4}});
        const whilePending = {{
          returned, state: store.state, confirmed: store.confirmed, pendingCount: store.pendingCount,
          pending: store.pending.map((e) => e.action), lastUpdate: updates[updates.length - 1],
        }};
        release();
        await store.settled(8000);
        await until(() => store.state.count === 4);
        return {{whilePending, after: {{state: store.state, pendingCount: store.pendingCount,
                                         lastUpdate: updates[updates.length - 1]}}}};
        """,
    )
    pending = result["whilePending"]
    assert pending["pendingCount"] == 1 and pending["pending"] == [{"type": "increment", "by": 4}]
    assert pending["state"] == {"count": 0} == pending["confirmed"], "without a reducer the state is not the confirmed one"
    assert pending["returned"] == {"count": 0}
    assert pending["lastUpdate"] == {"pending": 1, "count": 0}, "onUpdate did not report the pending action"
    after = result["after"]
    assert after["pendingCount"] == 0 and after["state"] == {"count": 4}
    assert after["lastUpdate"]["pending"] == 0
    assert counter(base, sid, token)[1] == 4
