"""A typed flow through a Python client generated from CartServer's own /openapi.json.

Run by scripts/template-check.sh with the generated package `client` on sys.path and the
server's base URL as the only argument. The cart's actions are sent as the generated models
(`CartDispatch`, `CartAdd`, `CartRemove`) and its state is read back as `CartState` and `CartLine`:
the feature, defined outside this repository's server, is typed in the description.
"""

import sys

from client import AuthenticatedClient, Client
from client.api.dispatch import dispatch_action
from client.api.sessions import create_session
from client.api.state import get_feature_state
from client.models import CartAdd, CartDispatch, CartLine, CartRemove, CartState, DispatchResult, SessionCreated

base = sys.argv[1]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        raise SystemExit(f"template client flow: {what}")
    checks += 1


created = create_session.sync_detailed(client=Client(base_url=base))
check(created.status_code == 201 and isinstance(created.parsed, SessionCreated), f"create: {created.status_code}")
session = created.parsed
api = AuthenticatedClient(base_url=base, token=session.token)

added = dispatch_action.sync(session.id, client=api, body=CartDispatch(feature="cart", action=CartAdd(type_="add", product="pear", quantity=2)))
check(isinstance(added, DispatchResult) and added.version == 1, f"dispatch add: {added!r}")
state = CartState.from_dict(added.state.additional_properties)
check(state.lines == [CartLine(product="pear", quantity=2)] and state.is_checking_out is False, f"state: {state!r}")

refused = dispatch_action.sync_detailed(session.id, client=api, body=CartDispatch(feature="cart", action=CartRemove(type_="remove", product="kiwi")))
check(refused.status_code == 422 and refused.parsed.error.code == "action_rejected", f"remove kiwi: {refused.status_code} {refused.parsed!r}")

read = get_feature_state.sync_detailed(session.id, "cart", client=api)
check(read.status_code == 200 and read.parsed.version == 1, f"read: {read.status_code} {read.parsed!r}")
check(CartState.from_dict(read.parsed.state.additional_properties).lines[0].product == "pear", f"read state: {read.parsed!r}")

print(f"template client flow: {checks} checks passed")
