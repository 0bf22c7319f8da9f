"""Checks a running Examples/CartServer over HTTP (scripts/template-check.sh starts it).

    python flow.py BASE RECORDING_OUT [STATE_OUT]

The package's one feature, `cart`, served by StateServer.run(features:middleware:): session,
dispatch, state, the event stream with the checkout's follow-up and effect, the cart's idle
timer (pending after an add, cancelled by the checkout), the history (devtools), the package's
middleware (clients may send neither `checkoutFinished` nor the timer's `expire`), the recording
(written to RECORDING_OUT for `CartServer replay`), and /openapi.json naming the feature.
Every wait is bounded by a socket timeout; nothing sleeps.
"""

import http.client
import json
import sys
import urllib.parse

BASE = sys.argv[1]
RECORDING_OUT = sys.argv[2]
STATE_OUT = sys.argv[3] if len(sys.argv) > 3 else None
HOST = urllib.parse.urlsplit(BASE)
TIMEOUT = 10


def request(method, path, body=None, token=None):
    connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=TIMEOUT)
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, (json.loads(raw) if raw else None)


def check(condition, message):
    if not condition:
        print(f"template flow: FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def events(path, token, count, last_event_id=None):
    """The first `count` events of a stream, as (event, id, data) tuples."""
    connection = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=TIMEOUT)
    headers = {"Authorization": f"Bearer {token}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    check(response.status == 200, f"GET {path}: {response.status}")
    found = []
    fields = {}
    while len(found) < count:
        line = response.fp.readline().decode()
        check(line != "", "the event stream ended early")
        line = line.rstrip("\n")
        if line == "":
            if "data" in fields:
                found.append((fields.get("event", "message"), fields.get("id"), json.loads(fields["data"])))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    connection.close()
    return found


status, features = request("GET", "/v1/features")
check(status == 200, f"GET /v1/features: {status}")
names = [feature["name"] for feature in features["features"]]
check(names == ["cart"], f"the features are {names}, not the package's cart alone")

status, created = request("POST", "/v1/sessions")
check(status == 201, f"POST /v1/sessions: {status} {created}")
session, token = created["id"], created["token"]
root = f"/v1/sessions/{session}"

status, change = request("POST", f"{root}/dispatch", {"feature": "cart", "action": {"type": "add", "product": "apple", "quantity": 2}}, token)
check(status == 200, f"dispatch add: {status} {change}")
check(change["version"] == 1 and change["state"]["lines"] == [{"product": "apple", "quantity": 2}], f"dispatch add: {change}")
if STATE_OUT:  # the cart's state as the server wrote it, for the generated Swift client
    with open(STATE_OUT, "w") as out:
        json.dump(change["state"], out)

# The idle timer the add scheduled: pending, its action the server's own.
status, timers = request("GET", f"{root}/timers", token=token)
check(status == 200 and [(t["id"], t["feature"], t["action"]) for t in timers["timers"]] == [("cart-idle", "cart", {"type": "expire"})], f"GET timers: {status} {timers}")
check(timers["timers"][0]["due"] - timers["timers"][0]["scheduledAt"] == 30 * 60 * 1000, f"the idle period: {timers}")

status, refused = request("POST", f"{root}/dispatch", {"feature": "cart", "action": {"type": "remove", "product": "kiwi"}}, token)
check(status == 422 and refused["error"]["code"] == "action_rejected", f"remove kiwi: {status} {refused}")

# The package's middleware: only the checkout work sends checkoutFinished.
status, forbidden = request("POST", f"{root}/dispatch", {"feature": "cart", "action": {"type": "checkoutFinished"}}, token)
check(status == 403 and forbidden["error"]["code"] == "forbidden", f"checkoutFinished from a client: {status} {forbidden}")
# Nor does a client send the idle timer's action (the middleware lets it through for the timer).
status, forbidden = request("POST", f"{root}/dispatch", {"feature": "cart", "action": {"type": "expire"}}, token)
check(status == 403 and forbidden["error"]["code"] == "forbidden", f"expire from a client: {status} {forbidden}")

status, unknown = request("POST", f"{root}/dispatch", {"feature": "counter", "action": {"type": "increment"}}, token)
check(status == 404 and unknown["error"]["code"] == "unknown_feature", f"an example feature on CartServer: {status} {unknown}")

status, change = request("POST", f"{root}/dispatch", {"feature": "cart", "action": {"type": "checkout"}}, token)
check(status == 200 and change["state"]["isCheckingOut"] is True, f"checkout: {status} {change}")
status, timers = request("GET", f"{root}/timers", token=token)
check(status == 200 and timers["timers"] == [], f"the checkout cancels the idle timer: {status} {timers}")

# A stream starts with a snapshot of the observed features.
snapshot = events(f"{root}/events?feature=cart", token, 1)[0]
check(snapshot[0] == "snapshot" and list(snapshot[2]["features"]) == ["cart"], f"first event: {snapshot}")
# Resumed after the checkout (seq 2): the follow-up with its effect, replayed or live (0.5 s of work).
follow_up = events(f"{root}/events?feature=cart", token, 1, last_event_id=2)[0]
check(follow_up[0] == "state" and follow_up[1] == "3", f"the event after the checkout: {follow_up}")
data = follow_up[2]
check(data["action"] == {"type": "checkoutFinished"}, f"the follow-up: {data}")
check(data["effect"] == {"type": "orderPlaced", "number": 1}, f"the effect: {data}")
check(data["state"] == {"lines": [], "isCheckingOut": False, "ordersPlaced": 1}, f"the state after checkout: {data}")

status, state = request("GET", f"{root}/state/cart", token=token)
check(status == 200 and state["version"] == 3 and state["state"]["ordersPlaced"] == 1, f"GET state: {status} {state}")

status, history = request("GET", f"{root}/history?feature=cart", token=token)
check(status == 200, f"GET history: {status}")
actions = [change["action"]["type"] for change in history["changes"]]
check(actions == ["add", "checkout", "checkoutFinished"], f"the history's actions: {actions}")

status, recording = request("GET", f"{root}/recording", token=token)
check(status == 200 and len(recording["changes"]) == 3, f"GET recording: {status}")
with open(RECORDING_OUT, "w") as out:
    json.dump(recording, out)

status, spec = request("GET", "/openapi.json")
check(status == 200, f"GET /openapi.json: {status}")
check("cart" in json.dumps(spec), "/openapi.json does not name the cart feature")

print("template flow: 17 checks passed")
