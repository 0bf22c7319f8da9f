"""Presence in headless Chromium against the real server binary: the JavaScript client's
`subscribe({presence, onPresence})` on both transports, and the web page showing who is
watching. Shares the fixtures and helpers of test_page.py; every wait polls a condition."""

from __future__ import annotations

from test_page import (  # noqa: F401  (fixtures)
    api,
    browser,
    run_client_script,
    server,
    severe_console_errors,
    text,
    wait,
    wait_loaded,
    wait_ready,
)


def test_client_presence_on_both_transports(server, browser):
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const c = await StateClient.createSession();
        const seenByWall = [];
        const wall = c.subscribe({
          presence: 'wall screen',
          onPresence(present, change) { seenByWall.push({labels: present.map((e) => e.label), change}); },
        });
        await until(() => wall.present.length === 1);
        const pad = c.subscribe({transport: 'fetch', presence: "Ada's iPad"});
        await until(() => pad.present.length === 2 && wall.present.length === 2);
        const listed = (await c.presence()).present.map((e) => e.label);
        const padSaw = pad.present.map((e) => e.label);
        pad.close();
        await until(() => wall.present.length === 1);
        const after = (await c.presence()).present.map((e) => e.label);
        // A reconnect starts the list afresh: no stale entry, this stream once.
        wall.reconnect();
        await until(() => wall.status === 'open' && wall.present.length === 1);
        await new Promise((r) => setTimeout(r, 200));
        const afterReconnect = wall.present.map((e) => e.label);
        wall.close();
        return {seenByWall, listed, padSaw, after, afterReconnect};
        """,
    )
    assert result["listed"] == ["wall screen", "Ada's iPad"], result
    assert result["padSaw"] == ["wall screen", "Ada's iPad"], result
    assert result["after"] == ["wall screen"], result
    assert result["afterReconnect"] == ["wall screen"], result
    labels = [entry["labels"] for entry in result["seenByWall"][:3]]
    assert labels == [["wall screen"], ["wall screen", "Ada's iPad"], ["wall screen"]], result["seenByWall"]
    assert "left" in result["seenByWall"][2]["change"]


def test_the_page_shows_who_is_watching(server, browser):
    base, _ = server
    created = api(base, "POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    a = browser(1100, 900)
    a.get(f"{base}/#session={sid}&token={token}")
    wait_ready(a)
    wait(a, lambda d: text(d, "watching").startswith("Watching now: 1"), "the page never showed itself watching")
    b = browser(390, 844, phone=True)
    b.get(f"{base}/#session={sid}&token={token}")
    wait_ready(b)
    wait(a, lambda d: text(d, "watching").startswith("Watching now: 2"), "A never showed B watching")
    present = api(base, "GET", f"/v1/sessions/{sid}/presence", token)["present"]
    assert len(present) == 2 and all(entry["label"].endswith("tab") for entry in present), present
    b.close()  # the tab goes away: its stream closes
    wait(a, lambda d: text(d, "watching").startswith("Watching now: 1"), "A never showed B leave")
    assert severe_console_errors(a) == []
