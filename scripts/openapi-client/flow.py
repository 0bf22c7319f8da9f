"""A short typed flow through a Python client generated from the served OpenAPI document.

Run by scripts/openapi-client-check.sh, with the generated package `client` on sys.path and the
server's base URL as the only argument. Every reply is a typed model (`DispatchResult`,
`FeatureState`), read through attributes, never as a dict.
"""

import sys

from client import AuthenticatedClient, Client
from client.api.dispatch import dispatch_action
from client.api.events import stream_events
from client.api.sessions import create_session
from client.api.state import get_feature_state
from client.models import (
    CounterDispatch,
    CounterIncrement,
    CounterSet,
    DispatchResult,
    FeatureState,
    SessionCreated,
)

base = sys.argv[1]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        raise SystemExit(f"openapi-client flow: {what}")
    checks += 1


created = create_session.sync_detailed(client=Client(base_url=base))
check(created.status_code == 201 and isinstance(created.parsed, SessionCreated), f"create: {created.status_code} {created.parsed!r}")
session = created.parsed
api = AuthenticatedClient(base_url=base, token=session.token)

result = dispatch_action.sync(session.id, client=api, body=CounterDispatch(feature="counter", action=CounterIncrement(type_="increment", by=5)))
check(isinstance(result, DispatchResult), f"dispatch: {result!r}")
check(result.feature == "counter" and result.version == 1 and result.effect is None, f"dispatch: {result!r}")
check(result.state.additional_properties == {"count": 5}, f"dispatch state: {result.state!r}")

read = get_feature_state.sync_detailed(session.id, "counter", client=api)
check(read.status_code == 200 and isinstance(read.parsed, FeatureState), f"read: {read.status_code} {read.parsed!r}")
check(read.parsed.version == 1 and read.headers.get("ETag") == '"1"', f"read: {read.parsed!r} {read.headers}")

stale = dispatch_action.sync_detailed(
    session.id, client=api, body=CounterDispatch(feature="counter", action=CounterSet(type_="set", value=0)), if_match='"0"'
)
check(stale.status_code == 412, f"stale If-Match: {stale.status_code}")
check(stale.parsed.error.code == "version_conflict", f"stale If-Match: {stale.parsed!r}")

current = dispatch_action.sync(
    session.id, client=api, body=CounterDispatch(feature="counter", action=CounterSet(type_="set", value=7)), if_match='"1"'
)
check(isinstance(current, DispatchResult) and current.version == 2, f"current If-Match: {current!r}")

unchanged = get_feature_state.sync_detailed(session.id, "counter", client=api, if_none_match='"2"')
check(unchanged.status_code == 304 and unchanged.content == b"", f"If-None-Match: {unchanged.status_code}")

# The event stream is text (a stream of server-sent events): the generated call returns it as a str.
with api.get_httpx_client().stream("GET", f"/v1/sessions/{session.id}/events", timeout=10) as response:
    check(response.headers["content-type"].startswith("text/event-stream"), f"events: {response.headers}")
    first = next(response.iter_lines())
    check(first == "id: 2", f"events: first line {first!r}")
check(callable(stream_events.sync_detailed), "stream_events has no call")

print(f"openapi-client flow: {checks} checks passed")
