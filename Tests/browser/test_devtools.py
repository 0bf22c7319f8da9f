"""The devtools page (GET /devtools) in headless Chromium, against the real server binary.

Shares the fixtures of test_page.py (server, browser). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import copy
import json
from urllib.parse import unquote

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from test_page import api, browser, screenshot, server, severe_console_errors, wait  # noqa: F401  (fixtures)


def rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#log tr.change")


def test_devtools_log_state_diff_travel_dispatch_and_export(server, browser):
    base, _ = server
    created = api(base, "POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    for action in ({"type": "increment"}, {"type": "increment", "by": 5}):
        api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "counter", "action": action})
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "add", "title": "milk"}})

    page = browser(1280, 900)
    page.get(base + "/devtools")
    page.find_element(By.ID, "session-id").send_keys(sid)
    page.find_element(By.ID, "session-token").send_keys(token)
    page.find_element(By.ID, "open").click()
    wait(page, lambda d: len(rows(d)) == 3, "the action log never showed the 3 changes")
    cells = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")][:5] for row in rows(page)]
    assert cells[0] == ["1", "counter", "1", "dispatch", '{"type":"increment"}']
    assert cells[2][:4] == ["3", "todos", "1", "dispatch"]

    # The state at a step: every feature as it was then.
    rows(page)[0].click()
    state = json.loads(page.find_element(By.ID, "state").text)
    assert state["counter"] == {"version": 1, "state": {"count": 1}}
    assert state["todos"]["version"] == 0

    # A diff between two steps names what changed.
    Select(page.find_element(By.ID, "diff-from")).select_by_value("1")
    Select(page.find_element(By.ID, "diff-to")).select_by_value("3")
    page.find_element(By.ID, "diff").click()
    diff = page.find_element(By.ID, "diff-result").text
    assert "/counter/count: 1 → 6" in diff, diff
    assert "/todos/items" in diff, diff

    # A hand-made dispatch into the live session appears in the log.
    Select(page.find_element(By.ID, "feature")).select_by_value("counter")
    action = page.find_element(By.ID, "action")
    action.clear()
    action.send_keys('{"type": "set", "value": 40}')
    page.find_element(By.ID, "dispatch").click()
    wait(page, lambda d: len(rows(d)) == 4, "the dispatched action never appeared")
    assert api(base, "GET", f"/v1/sessions/{sid}/state/counter", token)["state"] == {"count": 40}

    # A change made elsewhere arrives live (the event stream, through client.js).
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "counter", "action": {"type": "increment"}})
    wait(page, lambda d: len(rows(d)) == 5, "a change made elsewhere never arrived")

    # Travel to the first step: a new change with cause travel.
    rows(page)[0].find_element(By.CSS_SELECTOR, "button.travel").click()
    wait(page, lambda d: len(rows(d)) == 6, "the travel never appeared")
    last = [cell.text for cell in rows(page)[-1].find_elements(By.TAG_NAME, "td")][:4]
    assert last == ["6", "counter", "5", "travel"], last
    assert api(base, "GET", f"/v1/sessions/{sid}/state/counter", token) == {"feature": "counter", "version": 5, "state": {"count": 1}}

    # The export link holds the recording.
    link = page.find_element(By.ID, "export")
    assert link.get_attribute("download") == f"recording-{sid}.json"
    href = link.get_attribute("href")
    assert href.startswith("data:application/json;charset=utf-8,"), href[:60]
    exported = json.loads(unquote(href.split(",", 1)[1]))
    assert exported["format"] == "stateserver-recording" and len(exported["changes"]) == 6, exported

    # The live stream asks for JSON Patch deltas: changes made elsewhere to a growing todo list
    # arrive as patches, and the page's state at the last step is the server's.
    assert page.execute_script("return window.devtools.stream.delta") is True
    for index in range(8):
        api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "add", "title": f"a todo with a longish title {index}"}})
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "toggle", "id": "3"}})
    wait(page, lambda d: len(rows(d)) == 15, "the todos made elsewhere never arrived")
    assert page.execute_script("return window.devtools.patched") >= 4
    rows(page)[-1].click()
    state = json.loads(page.find_element(By.ID, "state").text)
    server_todos = api(base, "GET", f"/v1/sessions/{sid}/state/todos", token)
    assert state["todos"] == {"version": server_todos["version"], "state": server_todos["state"]}
    assert [row[:4] for row in ([cell.text for cell in r.find_elements(By.TAG_NAME, "td")] for r in rows(page))][-1] == [
        "15", "todos", "10", "dispatch"]
    # What was appended from the stream is what the server recorded.
    # The server sends most of them as patches (recording format 2); the page holds whole states.
    recorded = whole_states(api(base, "GET", f"/v1/sessions/{sid}/recording", token))
    assert page.execute_script("return window.devtools.recording.changes") == recorded["changes"]
    page.execute_script("window.scrollTo(0, 0)")
    screenshot(page, "devtools.png")
    assert severe_console_errors(page) == []


def whole_states(recording):
    """The recording with each change's `patch` (RFC 6902: add, remove, replace, which is what
    the server writes) applied to the feature's previous state and replaced by `state`: the
    test's own applier, not client.js's."""
    def parts(path):
        return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]

    def apply(document, patch):
        document = copy.deepcopy(document)
        for operation in patch:
            if operation["path"] == "":
                document = copy.deepcopy(operation["value"])
                continue
            *parents, last = parts(operation["path"])
            target = document
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            if isinstance(target, list):
                index = len(target) if last == "-" else int(last)
                if operation["op"] == "add":
                    target.insert(index, operation["value"])
                elif operation["op"] == "remove":
                    del target[index]
                else:
                    target[index] = operation["value"]
            elif operation["op"] == "remove":
                del target[last]
            else:
                target[last] = operation["value"]
        return document

    current = {start["name"]: start["state"] for start in recording["features"]}
    for change in recording["changes"]:
        if "patch" in change:
            change["state"] = apply(current[change["feature"]], change.pop("patch"))
        current[change["feature"]] = change["state"]
    return recording


def cells(driver, selector):
    """The text of each row's cells, read in one script: the page rebuilds its tables on every
    change, so elements found one call earlier may be gone (stale) the next."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((r) => [...r.cells].map((c) => c.textContent))", selector)


def timer_rows(driver):
    return cells(driver, "#timers tr.timer")


def log_causes(driver):
    return [row[3] for row in cells(driver, "#log tr.change")]


def test_devtools_lists_pending_timers_and_shows_the_one_that_fired(server, browser):
    base, _ = server
    created = api(base, "POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    for title in ("call Ada", "water the plants"):
        api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "add", "title": title}})
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "remind", "id": "2", "after": 3600}})

    page = browser(1280, 900)
    page.get(base + "/devtools")
    page.find_element(By.ID, "session-id").send_keys(sid)
    page.find_element(By.ID, "session-token").send_keys(token)
    page.find_element(By.ID, "open").click()
    wait(page, lambda d: len(timer_rows(d)) == 1, "the pending reminder was never listed")
    listed = timer_rows(page)[0]
    assert listed[:3] == ["remind-2", "todos", '{"id":"2","type":"reminderDue"}'], listed
    assert "(in 3" in listed[3], listed  # due in about an hour: "(in 3599 s)"

    # A reminder scheduled elsewhere joins the list (the change arrives on the stream), then
    # fires: the log shows a change of cause timer, and the list loses it.
    api(base, "POST", f"/v1/sessions/{sid}/dispatch", token, {"feature": "todos", "action": {"type": "remind", "id": "1", "after": 1}})
    wait(page, lambda d: any(row[0] == "remind-1" for row in timer_rows(d)) or "timer remind-1" in log_causes(d),
         "the new reminder never showed")
    wait(page, lambda d: log_causes(d)[-1:] == ["timer remind-1"], "the fired reminder never appeared in the log")
    wait(page, lambda d: [row[0] for row in timer_rows(d)] == ["remind-2"], "the fired reminder stayed listed")
    assert api(base, "GET", f"/v1/sessions/{sid}/state/todos", token)["state"]["items"][0]["reminded"] is True

    # Cancelled by hand from the page: the list empties.
    Select(page.find_element(By.ID, "feature")).select_by_value("todos")
    action = page.find_element(By.ID, "action")
    action.clear()
    action.send_keys('{"type": "cancelReminder", "id": "2"}')
    page.find_element(By.ID, "dispatch").click()
    wait(page, lambda d: timer_rows(d) == [] and d.find_element(By.ID, "timers-status").text == "none", "the cancelled reminder stayed listed")
    assert api(base, "GET", f"/v1/sessions/{sid}/timers", token) == {"timers": []}
    screenshot(page, "devtools-timers.png")
    assert severe_console_errors(page) == []
